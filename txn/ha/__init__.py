"""The highly available transaction service: several ``txn serve --zookeeper ...
--state postgresql://...`` servers, one leader at a time.

* ``txn.ha.zk``: the ZooKeeper layout (``<base>/election``, ``<base>/leader``), URLs,
  and the one boundary where kazoo's exceptions become ``txn`` errors.
* ``txn.ha.elected``: ``ElectedServer``, a server that contends for leadership, serves
  while it leads (state in PostgreSQL, ``txn.persist.postgres``, under a new epoch) and
  stops serving at once when it loses its ZooKeeper session.
* ``txn.ha.discovery``: ``ZooKeeperLeader``, the client side: the leader's address from
  ZooKeeper, followed as it changes (``ThriftTxClient("zk://...")``).

Safety never rests on ZooKeeper alone: a paused or partitioned leader may go on
believing it leads, so every change to the shared state is fenced by the epoch its
term took in PostgreSQL (``txn.persist.postgres``). ZooKeeper decides who *should*
serve; PostgreSQL refuses whoever no longer may.
"""
