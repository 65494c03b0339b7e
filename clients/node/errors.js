'use strict';
// One error class per jobguard SQLSTATE (class JG).  Each extends pg's own
// DatabaseError, so code that catches pg errors (err instanceof
// pg.DatabaseError, err.code === 'JG001') keeps working; the fields a caller
// acts on (the existing job's id, the blocking attempt, ...) are parsed from
// the server's message and DETAIL into properties (null when the message
// does not carry them).  The SQLSTATE decides the class; the text is only
// read for these fields.

const { DatabaseError } = require('pg');

// [property, 'message' | 'detail', pattern, convert]: the first group of
// the pattern, converted, becomes the property.
const id = Number;
const str = String;

class JobguardError extends DatabaseError {
  // Wrap the error pg raised: same message and fields, cause = the original.
  constructor(pgError) {
    super(pgError.message, pgError.length, 'error');
    for (const k of ['severity', 'code', 'detail', 'hint', 'position', 'internalPosition',
      'internalQuery', 'where', 'schema', 'table', 'column', 'dataType', 'constraint',
      'file', 'line', 'routine']) {
      if (pgError[k] !== undefined) this[k] = pgError[k];
    }
    this.name = this.constructor.name;
    this.cause = pgError;
    const texts = { message: pgError.message || '', detail: pgError.detail || '' };
    for (const [prop, source, pattern, convert] of this.constructor.fields) {
      const m = pattern.exec(texts[source]);
      this[prop] = m ? convert(m[1]) : null;
    }
  }
}
JobguardError.fields = [];

// define: a subclass of JobguardError for one SQLSTATE.
function define(name, sqlstate, condition, fields) {
  const cls = { [name]: class extends JobguardError {} }[name];
  cls.sqlstate = sqlstate;
  cls.condition = condition;
  cls.fields = fields;
  return cls;
}

const IdempotencyKeyReused = define('IdempotencyKeyReused', 'JG001', 'idempotency_key_reused', [
  ['jobId', 'detail', /^Job (\d+) was submitted/, id],
  ['idempotencyKey', 'message', /^idempotency key "(.*)" of owner ".*" was/, str],
  ['ownerId', 'message', /^idempotency key ".*" of owner "(.*)" was/, str],
  ['differsIn', 'detail', /this request differs in (.*)\.$/, str],
]);
const AttemptInFlight = define('AttemptInFlight', 'JG002', 'attempt_in_flight', [
  ['jobId', 'message', /^job (\d+) already has/, id],
  ['blockingAttemptId', 'detail', /^Attempt (\d+) /, id],
  ['blockingAttemptNo', 'detail', /^Attempt \d+ \(number (\d+),/, Number],
  ['blockingProvider', 'detail', /provider "(.*)"\) is/, str],
  ['blockingState', 'detail', /\) is (\w+);/, str],
  ['deadline', 'detail', /its deadline (?:is|was) (.*)\.$/, str],
]);
const JobClosed = define('JobClosed', 'JG003', 'job_closed', [
  ['jobId', 'message', /^job (\d+) has/, id],
  ['completedBy', 'detail', /^Attempt (\d+) holds its result/, id],
  ['cancelled', 'message', /^job \d+ has (been cancelled|already succeeded)/, (s) => s === 'been cancelled'],
]);
const ProviderNotCertified = define('ProviderNotCertified', 'JG004', 'provider_not_certified', [
  ['provider', 'message', /^provider "(.*)" is not certified/, str],
  ['operation', 'message', /for operation "(.*)"$/, str],
  ['jobId', 'detail', /^Job (\d+) targets/, id],
]);
const AttemptsExhausted = define('AttemptsExhausted', 'JG005', 'attempts_exhausted', [
  ['jobId', 'message', /^job (\d+) has used/, id],
  ['maxAttempts', 'message', /all of its (\d+) attempts/, Number],
]);
const InvalidTransition = define('InvalidTransition', 'JG006', 'invalid_transition', [
  ['attemptId', 'message', /^attempt (\d+) /, id],
  ['jobId', 'message', /^attempt \d+ of job (\d+) /, id],
  ['state', 'message', /: it is (\w+)$/, str],
]);
const ResultMismatch = define('ResultMismatch', 'JG007', 'result_mismatch', [
  ['attemptId', 'message', /^attempt (\d+) /, id],
  ['jobId', 'message', /^attempt \d+ of job (\d+) /, id],
]);
const JobNotFound = define('JobNotFound', 'JG008', 'job_not_found', [
  ['jobId', 'message', /^job (\d+) does not exist/, id],
]);
const AttemptNotFound = define('AttemptNotFound', 'JG009', 'attempt_not_found', [
  ['attemptId', 'message', /^attempt (\d+) does not exist/, id],
]);
// the two standard SQLSTATEs jobguard raises for bad arguments
const NullValueNotAllowed = define('NullValueNotAllowed', '22004', 'null_value_not_allowed', []);
const InvalidParameterValue = define('InvalidParameterValue', '22023', 'invalid_parameter_value', []);

const BY_SQLSTATE = Object.fromEntries([IdempotencyKeyReused, AttemptInFlight, JobClosed,
  ProviderNotCertified, AttemptsExhausted, InvalidTransition, ResultMismatch, JobNotFound,
  AttemptNotFound, NullValueNotAllowed, InvalidParameterValue].map((c) => [c.sqlstate, c]));

// translate: the jobguard class for an error from the server with one of
// jobguard's SQLSTATEs; any other error unchanged.
function translate(err) {
  const cls = err && typeof err.code === 'string' && BY_SQLSTATE[err.code];
  if (!cls || err instanceof JobguardError || err.severity === undefined) return err;
  return new cls(err);
}

module.exports = {
  JobguardError, IdempotencyKeyReused, AttemptInFlight, JobClosed, ProviderNotCertified,
  AttemptsExhausted, InvalidTransition, ResultMismatch, JobNotFound, AttemptNotFound,
  NullValueNotAllowed, InvalidParameterValue, BY_SQLSTATE, translate,
};
