'use strict';
// How jobguard's SQLSTATEs become HTTP responses.  Mapped by err.code only,
// never by message text: messages are for humans and may change wording.
// The response body is an RFC 9457 problem document that passes the
// server's message, DETAIL and HINT through for the human reading it.

const STATUS_BY_SQLSTATE = {
  JG001: [422, 'idempotency_key_reused'],   // same key, different request (IETF draft: 422)
  JG002: [409, 'attempt_in_flight'],        // an open attempt blocks a new one
  JG003: [409, 'job_closed'],               // succeeded or cancelled: the job still exists, so not 410
  JG004: [422, 'provider_not_certified'],   // a well-formed request the rules refuse
  JG005: [409, 'attempts_exhausted'],
  JG006: [409, 'invalid_transition'],       // the attempt's state does not allow it
  JG007: [422, 'result_mismatch'],          // same attempt, different result (like JG001)
  JG008: [404, 'job_not_found'],
  JG009: [404, 'attempt_not_found'],
  '22004': [400, 'null_value_not_allowed'],
  '22023': [400, 'invalid_parameter_value'],
  '22P02': [400, 'invalid_text_representation'], // e.g. a non-numeric id
  '40001': [503, 'serialization_failure'],  // retry the request
  '40P01': [503, 'deadlock_detected'],      // retry the request
};

function problemFromError(err) {
  const hit = err && err.code && STATUS_BY_SQLSTATE[err.code];
  if (!hit) {
    return {
      status: 500,
      body: { type: 'about:blank', title: 'internal_error', status: 500, detail: 'internal error' },
    };
  }
  const [status, title] = hit;
  const body = { type: 'about:blank', title, status, sqlstate: err.code, detail: err.message };
  if (err.detail) body.pg_detail = err.detail;
  if (err.hint) body.hint = err.hint;
  return { status, body };
}

module.exports = { STATUS_BY_SQLSTATE, problemFromError };
