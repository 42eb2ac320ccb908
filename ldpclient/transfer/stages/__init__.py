"""The stages of a knowledge transfer, one module each, in the order
:class:`~ldpclient.transfer.pipeline.KnowledgeTransfer` calls them: :mod:`.release` (noise each private record
once), :mod:`.queries` (post-process, plan, the public images' segments), :mod:`.label` (the teacher's
answers), :mod:`.train` (the student, in query rounds), :mod:`.adapt` (on the device) and :mod:`.predict` (the
labels). Each takes the run's :class:`~ldpclient.transfer.context.RunContext`.
"""
