"""A label run's open state, as one context manager: the privacy ledger, the journal and the query client that
writes to it, the progress bars, and the cluster the release and the student's passes run on. Entering opens
them in that order (what opened is closed again when a later one fails); leaving closes them, whatever happened.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from .images import show_ledger
from .progress import StageProgress

if TYPE_CHECKING:
    from ..cluster.engine import Cluster
    from ..io.records import RecordSource
    from ..privacy.ledger import Ledger
    from ..teachers.client import QueryClient
    from ..teachers.journal import Journal
    from .handoffs import RunSetup

__all__ = ["LabelSession"]


class LabelSession:
    """The ledger, the journalled query client, its progress bars and the cluster (None: this host) of one run on
    ``records``, open between ``__enter__`` and ``__exit__``. The ledger is told what the decoded images show as it
    opens (:func:`~.images.show_ledger`), before anything is checked or charged."""

    ledger: Ledger
    client: QueryClient
    progress: StageProgress
    cluster: Cluster | None

    def __init__(self, setup: RunSetup, records: RecordSource) -> None:
        self.setup = setup
        self.records = records

    def __enter__(self) -> LabelSession:
        from ..privacy.ledger import Ledger
        from ..teachers import Journal

        where = self.setup.opts.state_locations(self.setup.state)
        self.ledger = Ledger(where.ledger, key_file=where.ledger_key, cap_epsilon=self.setup.plan.terms.privacy_cap,
                             cap_origin="--privacy-cap")
        try:
            show_ledger(self.ledger, self.records)
            journal = Journal(where.journal)
        except BaseException:
            self.ledger.close()
            raise
        self.client = self._client(journal)
        try:
            self.cluster = self._cluster(where.ledger_key)
        except BaseException:
            self.client.close()
            self.ledger.close()
            raise
        self.progress = StageProgress(self.setup.ui, "", self.client)
        return self

    def _client(self, journal: Journal) -> QueryClient:
        """The query client, writing to ``journal``, under the run's money cap."""
        from ..teachers import CostMeter, QueryClient

        setup, opts = self.setup, self.setup.opts
        # a teacher billed in tokens books its own queries (the client asks it before each batch): no price of ours
        cost = CostMeter(price_per_query=0.0 if opts.facts.token_priced else setup.plan.terms.price,
                         cap=opts.money_cap)
        return QueryClient(setup.teacher, batch_size=opts.batch_size, workers=opts.workers, journal=journal,
                           cost=cost, scope=setup.scope)

    def _cluster(self, key: Path | None) -> Cluster | None:
        """The cluster named by ``--cluster`` (None without; ``validate()`` refused ``--cluster`` without
        ``--state``), joined; its workers open the ledger with the key file ``key``."""
        opts = self.setup.opts
        if opts.cluster is None or opts.state is None:
            return None
        from ..cluster.engine import Cluster, open_engine

        engine = open_engine(opts.cluster, timeout=min(10.0, opts.network.timeout))
        self.setup.ui.info(f"cluster: {engine.joined}")
        return Cluster(engine, opts.state, str(key) if key is not None else None, self.ledger.cap_epsilon,
                       self.ledger.cap_delta)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        """Close the progress bars, the client (its journal and teacher), the cluster, then the ledger."""
        self.progress.close()
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        self.ledger.close()
