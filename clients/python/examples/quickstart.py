import psycopg
import jobguard
from jobguard import IdempotencyKeyReused

with psycopg.connect(autocommit=True) as conn:  # PGHOST, PGDATABASE, ...
    sub = jobguard.submit(conn, "alice", "order-42", "charge",
                          {"amount": 1999, "currency": "EUR"}, "main-psp")
    attempt = jobguard.begin_attempt(conn, sub.job_id, timeout=30)
    outcome = jobguard.finish(conn, attempt, {"charge_id": "ch_1"})
    print(sub.created, outcome, jobguard.job_state(conn, sub.job_id))
    try:  # the same key for a different request
        jobguard.submit(conn, "alice", "order-42", "charge", {"amount": 5}, "main-psp")
    except IdempotencyKeyReused as err:
        print("key reused: job", err.job_id, "differs in", err.differs_in)
