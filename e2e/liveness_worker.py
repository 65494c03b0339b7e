"""One process of the liveness end-to-end test (e2e/liveness.py): a Python
Worker or Reconciler of jobguard's client, calling the fake provider
(e2e/fake_provider.py) over HTTP.

  liveness_worker.py worker NAME      claim 'charge' jobs, charge each at the
                                      provider under the job's provider key
  liveness_worker.py reconciler NAME  look unknown attempts up at the provider

PROVIDER_URL names the provider; PG* the database.  At a clean stop
(SIGTERM) it prints one line "stats <role> <name> <json>".
"""

import http.client
import json
import os
import socket
import sys
import urllib.error
import urllib.request
from typing import Any

import jobguard

URL = os.environ["PROVIDER_URL"]
#: how long a call waits for the provider before its outcome is unknown
HTTP_TIMEOUT = float(os.environ.get("HTTP_TIMEOUT", "1.5"))
NO_ANSWER = (socket.timeout, TimeoutError, ConnectionError, http.client.HTTPException)


def charge(job: Any) -> Any:
    """The handler: one POST under the provider key.  No answer (a timeout,
    a dropped reply) and 409 are InProgress: the attempt becomes unknown,
    never failed, as the provider may have charged."""
    req = urllib.request.Request(
        f"{URL}/charges", method="POST",
        data=json.dumps({"job_id": job.job_id, "params": job.params}).encode(),
        headers={"Content-Type": "application/json", "Idempotency-Key": job.provider_key or "",
                 "X-Attempt-Id": str(job.attempt_id)})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as res:
            return json.load(res)
    except urllib.error.HTTPError as err:
        if err.code == 409:
            raise jobguard.InProgress("provider: idempotency_key_in_use") from None
        raise jobguard.ProviderRefused(f"provider: HTTP {err.code}") from None
    except urllib.error.URLError as err:
        if isinstance(err.reason, NO_ANSWER):
            raise jobguard.InProgress(f"no answer: {err.reason}") from None
        raise
    except NO_ANSWER as err:
        raise jobguard.InProgress(f"no answer: {err!r}") from None


def reconcile(attempt: Any) -> Any:
    """The reconciler: the provider's answer under the key (finish), a key
    it never saw (ProviderRefused: the gate opens), or nothing yet (None:
    still unknown)."""
    try:
        with urllib.request.urlopen(f"{URL}/charges/{attempt.provider_key}",
                                    timeout=HTTP_TIMEOUT) as res:
            return json.load(res)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            raise jobguard.ProviderRefused("provider: never saw this key") from None
        return None


def main() -> None:
    """Run the role named on the command line until SIGTERM."""
    role, name = sys.argv[1], sys.argv[2]
    timeout = float(os.environ.get("ATTEMPT_TIMEOUT", "2"))
    if role == "worker":
        runner: Any = jobguard.Worker(charge, name=name, operations=["charge"], batch=4,
                                      timeout=timeout, wait=0.5)
    else:
        runner = jobguard.Reconciler(reconcile, name=name, operations=["charge"], batch=10,
                                     older_than=float(os.environ.get("RECONCILE_AFTER", "2")),
                                     lease=5, wait=0.5)
    stats = runner.run()
    print(f"stats {role} {name} {json.dumps(vars(stats))}", flush=True)


if __name__ == "__main__":
    main()
