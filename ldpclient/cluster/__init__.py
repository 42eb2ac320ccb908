"""Label runs beyond one machine: the stages whose work grows with the private images, on a Ray cluster.

``ldpclient label ... --state postgresql://... --cluster auto|ADDRESS`` (API: ``cluster=``) runs

* the **release**: an actor pool (:class:`~.stages.ReleaseStage`), each actor with its own connection to the
  shared ledger in PostgreSQL and this host's copy of the ledger's key file, noising and charging one block of
  images per task. A block is idempotent against the ledger: a block Ray runs again (its actor died) finds its
  releases stored and charges nothing more, so no image is noised twice and no cap is passed;
* the **passes of the student over every image** (adaptation's and the final labelling): an actor pool
  (:class:`~.stages.PredictStage`) holding the student.

The driver (the machine that runs the command) decodes the folder, reads the releases back from the ledger
(stored: free), queries the teacher through the journal, and trains the student; :mod:`ldpclient.run` does the
rest as without a cluster. Each stage is a plain function of a block (a dict of numpy arrays) in
:mod:`.stages`, so another engine stays a small adapter: :class:`~.engine.Engine` is the interface,
:class:`~.engine.LocalEngine` runs the stages here, :class:`~.ray_engine.RayEngine` on Ray Data. A cluster run
refuses a noise seed (``--seed``): with a shared seed, different images would get identical noise, and the
difference of two releases would show the difference of two images.
"""

from .engine import Cluster, Engine, LocalEngine, check_cluster_options

__all__ = ["Cluster", "Engine", "LocalEngine", "check_cluster_options"]
