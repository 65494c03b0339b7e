"""The Python certification runner's handlers in the failover end-to-end
test (e2e/failover/failover.js runs ``python3 -m jobguard certify`` with
them): each calls a fake provider's test mode (fake_providers.js) under
the run's provider key.  FAILOVER_URL_B and FAILOVER_URL_C name the
providers.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any, Callable, Tuple, Union


def _test_mode(name: str) -> Callable[[Any], Any]:
    """The handler of provider `name`'s test mode: its answer, whatever it is."""

    def call(job: Any) -> Any:
        """POST /charges at the provider, in test mode, under the job's key."""
        body = json.dumps({"job_id": job.job_id, "params": job.params}).encode()
        req = urllib.request.Request(
            os.environ[f"FAILOVER_URL_{name}"] + "/charges", data=body, method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": job.provider_key or "",
                     "X-Test-Mode": "1"})
        with urllib.request.urlopen(req, timeout=10) as res:
            return json.loads(res.read())

    return call


certify_b = _test_mode("B")
certify_c = _test_mode("C")


def same_amount(output: Any, winning: Any, job: Any) -> Union[bool, Tuple[str, str]]:
    """The candidate charged what the winning attempt charged."""
    if output.get("amount") == winning.get("amount"):
        return True
    return ("$.amount", f"charged {output.get('amount')!r}, the winning attempt {winning.get('amount')!r}")
