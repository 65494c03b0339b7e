-- Provider contracts: output contracts (a JSON Schema subset), the
-- 'rejected' path, and failover only to certified providers (JG004).
TRUNCATE jobguard.jobs, jobguard.attempts, jobguard.operations, jobguard.certifications
	RESTART IDENTITY;
\i sql/include/helpers.sql
-- a contract refused at definition time: SQLSTATE, message and detail
CREATE FUNCTION pg_temp.contract_error(contract jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	st text; msg text; det text;
BEGIN
	PERFORM jobguard.define_operation('bad', contract);
	RETURN 'accepted';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, msg = MESSAGE_TEXT, det = PG_EXCEPTION_DETAIL;
	RETURN st || ': ' || det;
END $$;

-- An LLM extraction: the business logic needs exactly these keys.
SELECT jobguard.define_operation('extract_person', '{
	"type": "object",
	"required": ["name", "age", "tags", "address", "status"],
	"additionalProperties": false,
	"properties": {
		"name":    {"type": "string"},
		"age":     {"type": "integer"},
		"score":   {"type": "number"},
		"tags":    {"type": "array", "items": {"type": "string"}},
		"nick":    {"type": ["string", "null"]},
		"address": {"type": "object", "required": ["city"],
					"properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
					"additionalProperties": false},
		"status":  {"enum": ["active", "inactive", 0, null, {"legacy": true}]},
		"choices": {"type": "array",
					"items": {"type": "object", "required": ["text"], "additionalProperties": false,
							  "properties": {"text": {"type": "string"}, "index": {"type": "integer"}}}}
	}
}');
SELECT operation, contract_version > 0 AS versioned FROM jobguard.operations;

-- results checked against it: NULL = satisfies, otherwise the first violation
SELECT v.label, jobguard.check_result('extract_person', v.result::jsonb) AS violation
  FROM (VALUES
	('valid', '{"name": "Ada", "age": 36, "tags": ["math"], "address": {"city": "London"}, "status": "active"}'),
	('valid, all optional keys', '{"name": "Ada", "age": 36, "score": 9.5, "tags": [], "nick": null, "address": {"city": "London", "zip": "N1"}, "status": 0, "choices": [{"text": "a", "index": 0}]}'),
	('integer written as 36.0', '{"name": "Ada", "age": 36.0, "tags": [], "address": {"city": "L"}, "status": null}'),
	('integer accepted by number', '{"name": "Ada", "age": 1, "score": 7, "tags": [], "address": {"city": "L"}, "status": {"legacy": true}}'),
	('hallucinated top-level key', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L"}, "status": "active", "confidence": 0.93}'),
	('missing required key', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L"}}'),
	('string for integer', '{"name": "Ada", "age": "36", "tags": [], "address": {"city": "L"}, "status": "active"}'),
	('fraction for integer', '{"name": "Ada", "age": 36.5, "tags": [], "address": {"city": "L"}, "status": "active"}'),
	('string for number', '{"name": "Ada", "age": 36, "score": "high", "tags": [], "address": {"city": "L"}, "status": "active"}'),
	('number in a string array', '{"name": "Ada", "age": 36, "tags": ["a", 2], "address": {"city": "L"}, "status": "active"}'),
	('type array violated', '{"name": "Ada", "age": 36, "tags": [], "nick": 7, "address": {"city": "L"}, "status": "active"}'),
	('nested missing key', '{"name": "Ada", "age": 36, "tags": [], "address": {"zip": "N1"}, "status": "active"}'),
	('nested extra key', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L", "country": "UK"}, "status": "active"}'),
	('enum: not listed', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L"}, "status": "maybe"}'),
	('enum: 1 is not 0', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L"}, "status": 1}'),
	('enum: other object', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L"}, "status": {"legacy": false}}'),
	('array of objects: extra key', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L"}, "status": 0, "choices": [{"text": "a"}, {"text": "b", "confidence": 1}]}'),
	('array of objects: wrong type', '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "L"}, "status": 0, "choices": [{"text": "a", "index": 1.5}]}'),
	('not an object at all', '["Ada", 36]'),
	('valid JSON, wrong shape', '"Sure! Here is the JSON you asked for."')
  ) AS v(label, result);

-- the remaining keyword combinations: type arrays at the root, items of
-- arrays, enum alone, and the empty contract that accepts anything
SELECT jobguard.define_operation('classify', '{"type": ["object", "array"], "items": {"enum": ["spam", "ham"]}}');
SELECT v.result, jobguard.check_result('classify', v.result::jsonb) AS violation
  FROM (VALUES ('["spam", "ham"]'), ('{}'), ('["eggs"]'), ('"spam"'), ('null'), ('true')) AS v(result);
SELECT jobguard.define_operation('anything', '{}');
SELECT jobguard.check_result('anything', '[1, "two", {"three": null}]') AS violation;
-- an operation without a contract accepts any JSON
SELECT jobguard.check_result('never_defined', '{"whatever": true}') AS violation;

-- malformed contracts are refused when defined (22023), naming the keyword
-- and its path; nothing is silently ignored
SELECT c.contract, pg_temp.contract_error(c.contract::jsonb) AS refused
  FROM (VALUES
	('[]'),
	('"object"'),
	('{"type": "int"}'),
	('{"type": 5}'),
	('{"type": []}'),
	('{"type": ["string", "string"]}'),
	('{"type": ["string", 1]}'),
	('{"minimum": 0}'),
	('{"$schema": "https://json-schema.org/draft/2020-12/schema"}'),
	('{"properties": {"age": {"type": "integer", "minimum": 0}}}'),
	('{"properties": []}'),
	('{"properties": {"a": "string"}}'),
	('{"required": "name"}'),
	('{"required": ["a", 1]}'),
	('{"required": ["a", "a"]}'),
	('{"additionalProperties": {"type": "string"}}'),
	('{"items": [{"type": "string"}]}'),
	('{"items": true}'),
	('{"enum": []}'),
	('{"enum": "a"}'),
	('{"properties": {"deep": {"items": {"properties": {"x": {"typo": 1}}}}}}')
  ) AS c(contract);
-- the whole error of one of them
SELECT jobguard.define_operation('extract_person', '{"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}}');
-- a refused definition left the old contract in place
SELECT jobguard.check_result('extract_person', '{"name": "Ada"}') AS still_the_old_contract;
SELECT count(*) AS bad_operations FROM jobguard.operations WHERE operation = 'bad';

-- finish_attempt applies the contract before the compare-and-swap: a
-- breaking result fails the attempt ('rejected') and leaves the slot free
SELECT job_id AS p1 FROM jobguard.submit('alice', 'p-1', 'extract_person', '{"text": "Ada, 36, London"}', 'model-a') \gset
SELECT jobguard.begin_attempt(:p1) AS p1_a1 \gset
SELECT jobguard.finish_attempt(:p1_a1, '{"name": "Ada", "age": 36, "tags": [], "address": {"city": "London"}, "status": "active", "confidence": 0.93}');
SELECT attempt_no, provider, state, error FROM jobguard.attempts_of(:p1);
SELECT state, completed_by, result, version FROM jobguard.job(:p1);
-- the rejected attempt is failed: it cannot report again
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.finish_attempt(%s, '{"name": "Ada"}')$$, :p1_a1));
-- failover: another provider must be certified for the operation first
SELECT jobguard.begin_attempt(:p1, 'model-b');
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s, 'model-b')$$, :p1));
SELECT jobguard.certify_provider('extract_person', 'model-b',
	'{"suite": "extract-person-v2", "cases": 120, "passed": 120, "temperature": 0}');
SELECT jobguard.begin_attempt(:p1, 'model-b') AS p1_a2 \gset
SELECT jobguard.finish_attempt(:p1_a2, '{"name": "Ada", "age": 36, "tags": ["math"], "address": {"city": "London"}, "status": "active"}');
SELECT state, completed_by, result->>'name' AS name, version FROM jobguard.job(:p1);
-- the job's own provider never needs a certification
SELECT job_id AS p2 FROM jobguard.submit('alice', 'p-2', 'extract_person', '{"text": "Bob"}', 'model-a') \gset
SELECT jobguard.begin_attempt(:p2, 'model-a') AS own_provider_attempt \gset
SELECT jobguard.fail_attempt(:own_provider_attempt, 'rate limited');

-- revoke: the provider is refused again; revoking it twice is an error
SELECT jobguard.revoke_provider('extract_person', 'model-b');
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s, 'model-b')$$, :p2));
SELECT jobguard.revoke_provider('extract_person', 'model-b');
SELECT jobguard.revoke_provider('extract_person', 'no-such-model');
-- a certification is for one operation only
SELECT jobguard.certify_provider('classify', 'model-c');
SELECT pg_temp.sqlstate_of(format($$SELECT jobguard.begin_attempt(%s, 'model-c')$$, :p2));
-- certifying again renews it, with the new evidence
SELECT jobguard.certify_provider('extract_person', 'model-b', '{"suite": "extract-person-v3"}');
SELECT jobguard.begin_attempt(:p2, 'model-b') AS recertified_attempt \gset
SELECT operation, provider, certified, evidence, revoked_at IS NULL AS never_revoked_since, operation_has_contract
  FROM jobguard.certification_overview ORDER BY operation, provider;

-- redefining a contract takes effect on the next finish, in this backend too
SELECT jobguard.define_operation('extract_person', '{"type": "object", "required": ["name"]}');
SELECT jobguard.finish_attempt(:recertified_attempt, '{"name": "Bob", "anything": "goes now"}');
SELECT state, result FROM jobguard.job(:p2);

-- bad input
SELECT t.call, pg_temp.sqlstate_of(t.call) AS refused
  FROM (VALUES
	($$SELECT jobguard.define_operation(NULL, '{}')$$),
	($$SELECT jobguard.define_operation('op', NULL)$$),
	($$SELECT jobguard.define_operation('', '{}')$$),
	($$SELECT jobguard.define_operation(repeat('o', 64), '{}')$$),
	($$SELECT jobguard.certify_provider(NULL, 'p')$$),
	($$SELECT jobguard.certify_provider('op', NULL)$$),
	($$SELECT jobguard.certify_provider('op', '')$$),
	($$SELECT jobguard.certify_provider('op', repeat('p', 64))$$),
	($$SELECT jobguard.revoke_provider(NULL, 'p')$$),
	($$SELECT jobguard.revoke_provider('op', NULL)$$),
	($$SELECT jobguard.check_result(NULL, '{}')$$),
	($$SELECT jobguard.check_result('op', NULL)$$)
  ) AS t(call);
SELECT count(*) AS operations FROM jobguard.operations;
SELECT count(*) AS certifications FROM jobguard.certifications;

-- an operation name of 63 characters, each two or more bytes (allowed:
-- names are counted in characters), has a contract like any other: the
-- submit, begin, finish and check_result all work with it
SELECT repeat('é', 62) || '€' AS wide_op \gset
SELECT length(:'wide_op') AS chars, octet_length(:'wide_op') AS bytes;
SELECT jobguard.define_operation(:'wide_op', '{"type": "object", "required": ["id"]}');
SELECT job_id AS wide_job FROM jobguard.submit('wide', 'k1', :'wide_op', '{}', 'p') \gset
SELECT jobguard.begin_attempt(:wide_job) AS wide_attempt \gset
SELECT jobguard.finish_attempt(:wide_attempt, '{"no_id": 1}');
SELECT jobguard.begin_attempt(:wide_job) AS wide_attempt \gset
SELECT jobguard.finish_attempt(:wide_attempt, '{"id": "ch_wide"}');
SELECT jobguard.job_state(:wide_job), jobguard.check_result(:'wide_op', '{"id": 1}') IS NULL AS conforms,
	   jobguard.check_result(:'wide_op', '{}');
SELECT pg_temp.sqlstate_of(format('SELECT jobguard.define_operation(%L, %L)', :'wide_op' || 'x', '{}'));
-- and the widest name of all: 63 characters of four bytes each
SELECT jobguard.define_operation(repeat(U&'\+01F600', 63), '{"type": "object"}');
SELECT octet_length(repeat(U&'\+01F600', 63)) AS bytes,
	   jobguard.check_result(repeat(U&'\+01F600', 63), '[]') AS refused;
