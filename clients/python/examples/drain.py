import psycopg

import jobguard

BATCH = 100   # at most this many jobs in memory (claim takes up to 1000 at once)


def charge(job: jobguard.Claimed) -> dict:
    """Ask the provider once, under the attempt's provider key (its idempotency key)."""
    if job.params.get("in_progress"):
        raise jobguard.InProgress("idempotency_key_in_use")    # the provider is still on it
    if job.params.get("declined"):
        raise jobguard.ProviderRefused("card declined")        # the provider said no
    return {"charge_id": f"ch_{job.job_id}", "key": job.provider_key}


drained = 0
with psycopg.connect(autocommit=True) as conn:   # PGHOST, PGDATABASE, ...
    while jobs := jobguard.claim(conn, "drain", ["charge"], timeout=60, max_jobs=BATCH):
        ids, results = [], []
        for job in jobs:          # each handler runs once; nothing here runs it again
            try:
                result = charge(job)
            except jobguard.ProviderRefused as err:             # the provider said no
                jobguard.fail(conn, job.attempt_id, f"{type(err).__name__}: {err}")
            except Exception:           # in progress, or no answer: it may have done the work
                jobguard.mark_unknown(conn, job.attempt_id)     # unknown, never failed
            else:
                ids.append(job.attempt_id)
                results.append(result)
        # one statement records the batch; a lost connection here ends the
        # loop with the attempts still open (they time out to unknown), and
        # never runs a handler twice
        for out in jobguard.finish_many(conn, ids, results):
            if out.refused:
                print("not recorded:", out.attempt_id, out.sqlstate, out.message)
        drained += len(jobs)
print("drained", drained)
