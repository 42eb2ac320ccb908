"""Reading private images and writing outputs: folders, decoding, records in batches, the bundled
digits, atomic output files, the query-log format, and text a peer controls made safe."""
