"""txms's binary protocol (docs/rpc.md): length-prefixed frames with request ids, many
requests in flight per connection, answered in any order; bodies are Thrift structs.

``frames`` (the byte layout), ``ops`` (the table of operations), ``server`` and
``connection`` (the server), ``backend`` (what the operations do, over
``MessagingService``). Clients: ``tms.client.MessagingClient("tms://host:port")`` and
``tms.aio``.
"""
