-- The shop's procedures with jobguard inside their transactions.  Ids are
-- captured with \gset, so the output depends on sequence values only where
-- an error message names its attempt and job (JG007); errors are terse (the
-- message line, no deadline timestamps).
\set VERBOSITY terse
SELECT jobguard.define_operation('charge', '{"type": "object", "required": ["charge_id"]}');
SELECT jobguard.certify_provider('charge', 'backup-psp', '{"suite": "charge-contract"}');

-- placing an order creates the job and the order together
CALL shop.place_order('ana', 'cart-17', 2500) \gset ana_
SELECT :'ana_created' AS created,
	   (SELECT count(*) FROM shop.orders WHERE id = :ana_order_id AND charge_job = :ana_charge_job) AS orders,
	   jobguard.job_state(:ana_charge_job) AS job_state;
-- the retry (a double-click, a lost response) is the same order and job
CALL shop.place_order('ana', 'cart-17', 2500) \gset retry_
SELECT :'retry_created' AS created, :retry_order_id = :ana_order_id AS same_order,
	   :retry_charge_job = :ana_charge_job AS same_job;
-- the same key with another amount is refused (JG001), nothing is written
CALL shop.place_order('ana', 'cart-17', 2600);
SELECT (SELECT count(*) FROM jobguard.jobs) AS jobs, (SELECT count(*) FROM shop.orders) AS orders;

-- rolled back: neither the job nor the order exists
BEGIN;
CALL shop.place_order('ben', 'cart-1', 1000) \gset
SELECT (SELECT count(*) FROM jobguard.jobs) AS jobs, (SELECT count(*) FROM shop.orders) AS orders;
ROLLBACK;
-- the procedure fails after submit (amount 0 breaks the shop's CHECK):
-- the job it had submitted goes with it
CALL shop.place_order('ben', 'cart-2', 0);
SELECT owner_id, idempotency_key FROM jobguard.jobs ORDER BY id;
SELECT customer_id, idempotency_key FROM shop.orders ORDER BY id;
-- so the rolled-back key is free, and the next try is a new job
CALL shop.place_order('ben', 'cart-1', 1000) \gset ben_
SELECT :'ben_created' AS created;

-- ana's order: the main provider stalls, an operator stops waiting, the
-- certified fallback charges; then the main provider's callback arrives
CALL shop.start_payment(:ana_order_id) \gset main_
CALL shop.start_payment(:ana_order_id);					-- JG002: in flight
SELECT jobguard.mark_unknown(:main_attempt_id);			-- the worker timed out
SELECT jobguard.cancel_attempt(:main_attempt_id, 'main-psp silent for 30 s, failing over');
CALL shop.start_payment(:ana_order_id, 'cheap-psp');	-- JG004: not certified
CALL shop.start_payment(:ana_order_id, 'backup-psp') \gset backup_
CALL shop.record_payment(:backup_attempt_id, 'bk_001');	-- the fallback wins
CALL shop.record_payment(:backup_attempt_id, 'bk_001');	-- callback delivered twice: nothing new
CALL shop.record_payment(:main_attempt_id, 'mn_001');	-- the late duplicate loses
CALL shop.record_payment(:main_attempt_id, 'mn_001');
CALL shop.record_payment(:main_attempt_id, 'mn_999');	-- JG007: a different report
SELECT customer_id, amount_cents, status FROM shop.orders ORDER BY id;
SELECT o.customer_id, p.attempt_id = :backup_attempt_id AS fallback, p.provider, p.charge_id, p.status
  FROM shop.payments p JOIN shop.orders o ON o.id = p.order_id ORDER BY p.id;
SELECT attempt_no, provider, state, lost_to = :backup_attempt_id AS lost_to_fallback, lost_result
  FROM jobguard.attempts_of(:ana_charge_job);
SELECT state, completed_by = :backup_attempt_id AS won_by_fallback, result
  FROM jobguard.job(:ana_charge_job);

-- ben's order: the callback's transaction rolls back, and the win with it
CALL shop.start_payment(:ben_order_id) \gset ben_
BEGIN;
CALL shop.record_payment(:ben_attempt_id, 'mn_002');
SELECT jobguard.job_state(:ben_charge_job), (SELECT status FROM shop.orders WHERE id = :ben_order_id);
ROLLBACK;
SELECT jobguard.job_state(:ben_charge_job), (SELECT status FROM shop.orders WHERE id = :ben_order_id);
CALL shop.record_payment(:ben_attempt_id, 'mn_002');
SELECT jobguard.job_state(:ben_charge_job), (SELECT status FROM shop.orders WHERE id = :ben_order_id);
-- a paid order takes no more attempts (JG003)
CALL shop.start_payment(:ana_order_id);
