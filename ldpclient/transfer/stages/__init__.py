"""The stages of a knowledge transfer, one module each, in the order
:class:`~ldpclient.transfer.pipeline.KnowledgeTransfer` calls them; each takes the run's
:class:`~ldpclient.transfer.context.RunContext`.

1. :mod:`.release`: each private record is released once with an LDP mechanism (through the
   :class:`~ldpclient.privacy.ledger.Ledger` when given: stored releases are reused for free, fresh ones are
   charged per record and capped), in chunks: memory O(chunk + n x released elements), not O(n x record);
2. :mod:`.queries`: the releases are post-processed (resized back after reduce-before-noise, clipped,
   denoised; free), lazily, and Q queries are planned from them (LDPKiT-Sup pairs, LDPKiT-Rand noise copies,
   or the releases themselves) in batches with stable ids (:class:`~ldpclient.transfer.query_book.QueryBook`);
3. :mod:`.label`: the teacher answers each query; only the labels are kept (int8 per query);
4. :mod:`.train`: a local student learns the hard labels (warmed up on the clean records first with
   ``warmup``; in query rounds with ``query_rounds``);
5. :mod:`.adapt` (``adapt=True``, default): the student is fine-tuned on its own confident labels of the clean
   private records, anchored to the teacher-labelled queries (local, nothing sent, no privacy cost; the
   adapted student has seen the clean records and stays on the device);
6. :mod:`.predict`: the student labels the clean private records, locally (with ``balance`` and no public
   images, from equal class shares, not the teacher's answer shares: :mod:`ldpclient.transfer.prior`).

:mod:`.keep` keeps a trained result for a run that would train on the same; :mod:`.outcome` assembles what a
run returns beside its labels.
"""
