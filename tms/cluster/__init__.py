"""Several messaging instances on one shared store (PostgreSQL, ``tms.store.postgres``):
membership and topic ownership in ZooKeeper (``tms.cluster.ownership``), each owner's
writes fenced in the store. ``tms serve --zookeeper ... --store postgresql://...``."""
