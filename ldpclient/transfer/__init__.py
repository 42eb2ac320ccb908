"""The stages after release: query plan (augmentation), post-processing, student, knowledge transfer."""
