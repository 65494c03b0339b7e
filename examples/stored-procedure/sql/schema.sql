-- An existing shop schema: orders and their payments.  The shop's own
-- procedures call jobguard inside their transactions, so that charging an
-- order is one job however often the client retries, and the job and the
-- shop's rows commit or roll back together.
CREATE SCHEMA shop;

CREATE TABLE shop.orders (
	id				bigserial PRIMARY KEY,
	customer_id		text NOT NULL,
	idempotency_key text NOT NULL,
	amount_cents	integer NOT NULL CHECK (amount_cents > 0),
	status			text NOT NULL DEFAULT 'awaiting_payment'
					CHECK (status IN ('awaiting_payment', 'paid')),
	charge_job		bigint NOT NULL UNIQUE,		-- jobguard.jobs.id
	UNIQUE (customer_id, idempotency_key)
);

-- Every provider charge the shop hears of: the winner is captured, a charge
-- that lost the race must be refunded.
CREATE TABLE shop.payments (
	id				bigserial PRIMARY KEY,
	order_id		bigint NOT NULL REFERENCES shop.orders,
	attempt_id		bigint NOT NULL UNIQUE,		-- jobguard.attempts.id
	provider		text NOT NULL,
	charge_id		text NOT NULL,
	status			text NOT NULL CHECK (status IN ('captured', 'refund_needed'))
);
CREATE UNIQUE INDEX payments_one_capture ON shop.payments (order_id) WHERE status = 'captured';

-- Place an order: submit the charge with the order's idempotency key, and
-- create the order only when the job is new.  A retried call returns the
-- same order; a changed amount under the same key raises JG001.
CREATE PROCEDURE shop.place_order(customer text, key text, amount_cents integer,
								  INOUT order_id bigint DEFAULT NULL,
								  INOUT charge_job bigint DEFAULT NULL,
								  INOUT created boolean DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
	SELECT s.job_id, s.created INTO charge_job, created
	  FROM jobguard.submit(customer, key, 'charge',
						   jsonb_build_object('amount_cents', amount_cents, 'currency', 'EUR'),
						   'main-psp') s;
	IF created THEN
		INSERT INTO shop.orders (customer_id, idempotency_key, amount_cents, charge_job)
		VALUES (customer, key, amount_cents, charge_job)
		RETURNING id INTO order_id;
	ELSE
		SELECT o.id INTO STRICT order_id FROM shop.orders o WHERE o.charge_job = place_order.charge_job;
	END IF;
END $$;

-- Start charging an order (the payment worker's step); provider NULL means
-- the job's own provider.
CREATE PROCEDURE shop.start_payment(order_id bigint, provider text DEFAULT NULL,
									INOUT attempt_id bigint DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
	SELECT jobguard.begin_attempt(o.charge_job, provider, '30 seconds') INTO attempt_id
	  FROM shop.orders o WHERE o.id = start_payment.order_id;
END $$;

-- A provider's callback: the charge it made for an attempt.  finish_attempt
-- decides: the winner is captured and the order paid; a charge that lost
-- (a late duplicate after a failover) is recorded for a refund.  A callback
-- delivered twice changes nothing the second time.
CREATE PROCEDURE shop.record_payment(attempt_id bigint, charge_id text,
									 INOUT outcome text DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
	paid_order bigint;
	charged_by text;
BEGIN
	outcome := jobguard.finish_attempt(attempt_id, jsonb_build_object('charge_id', charge_id));
	SELECT o.id, a.provider INTO STRICT paid_order, charged_by
	  FROM jobguard.attempt_overview a JOIN shop.orders o ON o.charge_job = a.job_id
	 WHERE a.attempt_id = record_payment.attempt_id;
	IF outcome IN ('won', 'lost') THEN
		INSERT INTO shop.payments (order_id, attempt_id, provider, charge_id, status)
		VALUES (paid_order, attempt_id, charged_by, charge_id,
				CASE outcome WHEN 'won' THEN 'captured' ELSE 'refund_needed' END)
		ON CONFLICT ON CONSTRAINT payments_attempt_id_key DO NOTHING;
	END IF;
	IF outcome = 'won' THEN
		UPDATE shop.orders o SET status = 'paid' WHERE o.id = paid_order;
	END IF;
END $$;
