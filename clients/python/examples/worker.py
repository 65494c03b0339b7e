import logging
import time

from jobguard import Claimed, RetryLater, Worker


def send_email(job: Claimed) -> dict:
    """Handle one job; what it returns becomes the job's result."""
    if job.params.get("busy") and job.attempt_no == 1:
        raise RetryLater("mail server busy", retry_in=2)   # a failed attempt, retried in 2 s
    time.sleep(job.params.get("seconds", 0))              # the work; heartbeats keep the attempt
    print("sent", job.job_id, "to", job.params["to"], flush=True)
    return {"sent_to": job.params["to"]}


logging.basicConfig(level=logging.INFO)
# PGHOST, PGDATABASE, ... name the database; SIGTERM stops it after the current job
Worker(send_email, operations=["send-email"], batch=10, timeout=30).run()
