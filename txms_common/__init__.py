"""What ``txn`` and ``tms`` share and neither owns: time, background loops, retry pauses
and the event loop. No domain knowledge lives here, and nothing here imports either
package, so each may import it without depending on the other.

* ``clock`` — the injected wall clock (``Clock``, ``SYSTEM_CLOCK``);
* ``periodic`` — a daemon thread running a function every so often (``PeriodicTask``);
* ``retry`` — the pauses between attempts (``backoff`` and the strategies on it);
* ``loop`` — the event loop every server of the project runs on (``new_event_loop``).
* ``lazy`` — package names that load on first use (``lazy_names``).
"""
