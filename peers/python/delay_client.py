"""delay_client in Python + gevent: the greenlet peer of the delay-client benchmark.

Needs gevent (`pip install gevent`); the benchmark runs this peer only when
`python3 -c "import gevent"` succeeds, and skips it with a note otherwise.

The backend answers each request after D ms. One greenlet per request, each
opening its own http.client.HTTPConnection and sending `Connection: close`, all
spawned at once; timed from just before the first spawn to the end of joinall.
A request that raises, or answers with a status other than 200, is counted in
errors and the run goes on; the first such error is printed to stderr.
Usage: python3 delay_client.py URL [N]   (N defaults to 1000; prints one JSON line)
"""

from gevent import monkey

monkey.patch_all()  # must run before anything else imports socket or threading

import http.client  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

import gevent  # noqa: E402


def main():
    if not 2 <= len(sys.argv) <= 3:
        sys.exit("usage: python3 delay_client.py URL [N]")
    url = urlsplit(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) == 3 else 1000
    if n < 1:
        sys.exit("N must be positive")
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    counts = {"ok": 0, "errors": 0}
    first_error = []

    def fail(e):
        counts["errors"] += 1
        if not first_error:
            first_error.append(e)
            print(f"first error: {type(e).__name__}: {e}", file=sys.stderr)

    def get():
        conn = http.client.HTTPConnection(url.hostname, url.port or 80)
        try:
            conn.request("GET", path, headers={"Connection": "close"})
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                counts["ok"] += 1
            else:
                fail(RuntimeError(f"status {response.status} {response.reason}"))
        except Exception as e:  # count every failure and go on
            fail(e)
        finally:
            conn.close()

    start = time.monotonic()
    gevent.joinall([gevent.spawn(get) for _ in range(n)])
    seconds = time.monotonic() - start
    print(json.dumps({"requests": n, "ok": counts["ok"], "errors": counts["errors"], "seconds": seconds}))


if __name__ == "__main__":
    main()
