"""txms beside the systems its users would pick instead, and beside the physical limits.

One run on one machine measures, with the same payloads, batches and concurrency:

* txms (the standalone stack over loopback: ``MessagingClient`` and a lean load
  generator over its REST API, ``ThriftTxClient`` for transactions);
* Redis Streams, with ``appendfsync always`` and with ``everysec``;
* PostgreSQL, a message table with a bigserial id, ``synchronous_commit = on``;
* the limits: raw LevelDB (plyvel) and a raw loopback HTTP echo.

Modules: ``base`` (the contract every system implements), ``driver`` (closed-loop
load over processes and threads), ``workloads`` (what is measured, in what order),
``report`` (results file, ratios, markdown, plots), ``servers`` (throwaway
``redis-server`` and PostgreSQL), one adapter per system (``txms``, ``redis_streams``,
``postgres``, ``limits``), and ``run`` (the command).

    make bench-deps            # redis-server and PostgreSQL from Debian's packages
    make bench-peers-quick     # the smoke run (< 2 min)
    make bench-peers           # the full run (~18 min on a 2-vCPU VM)
"""
