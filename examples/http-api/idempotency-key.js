'use strict';
// The Idempotency-Key header as the IETF draft defines it: an RFC 8941
// Structured Field Item whose value is a String ("k-2").  A bare Token
// (k-2) is accepted as the same key, so that both spellings name one job.
// Parameters (;a=1) are parsed and ignored.  Anything else is a syntax
// error: parseIdempotencyKey throws, and the service answers 400.

class KeySyntaxError extends Error {}

const TOKEN_START = /[A-Za-z*]/;
const TCHAR = /[!#$%&'*+\-.^_`|~0-9A-Za-z:/]/;
const KEY_START = /[a-z*]/;
const KEY_CHAR = /[a-z0-9_\-.*]/;

// parseIdempotencyKey: the key a header value names (a string), or throws
// KeySyntaxError with what is wrong.
function parseIdempotencyKey(header) {
  const p = { s: header, i: 0 };
  skip(p, ' ');
  const key = bareItem(p, true);
  parameters(p);
  skip(p, ' ');
  if (p.i !== p.s.length) fail(p, 'unexpected characters after the key');
  return key;
}

// fail: throw a syntax error at the current position.
function fail(p, what) {
  throw new KeySyntaxError(`${what} at offset ${p.i}`);
}

// skip: move past any run of the given character.
function skip(p, c) {
  while (p.s[p.i] === c) p.i++;
}

// bareItem: an sf-string or sf-token (keyOnly), or, for a parameter value,
// also an integer, decimal, boolean or byte sequence.
function bareItem(p, keyOnly) {
  const c = p.s[p.i];
  if (c === '"') return string(p);
  if (c !== undefined && TOKEN_START.test(c)) return token(p);
  if (keyOnly) fail(p, 'expected a string ("...") or a token');
  if (c === '?') {
    if (p.s[p.i + 1] !== '0' && p.s[p.i + 1] !== '1') fail(p, 'invalid boolean');
    p.i += 2;
    return true;
  }
  if (c === ':') {
    const end = p.s.indexOf(':', p.i + 1);
    if (end < 0 || !/^[A-Za-z0-9+/=]*$/.test(p.s.slice(p.i + 1, end))) fail(p, 'invalid byte sequence');
    p.i = end + 1;
    return true;
  }
  const m = /^-?[0-9]{1,15}(\.[0-9]{1,3})?/.exec(p.s.slice(p.i));
  if (!m) fail(p, 'invalid parameter value');
  p.i += m[0].length;
  return true;
}

// string: an sf-string; only \" and \\ may be escaped, only printable ASCII.
function string(p) {
  let out = '';
  p.i++;
  for (;;) {
    const c = p.s[p.i++];
    if (c === undefined) fail(p, 'unterminated string');
    if (c === '"') return out;
    if (c === '\\') {
      const e = p.s[p.i++];
      if (e !== '"' && e !== '\\') fail(p, 'invalid escape in string');
      out += e;
    } else {
      const code = c.charCodeAt(0);
      if (code < 0x20 || code > 0x7e) fail(p, 'invalid character in string');
      out += c;
    }
  }
}

// token: an sf-token.
function token(p) {
  const start = p.i;
  p.i++;
  while (p.i < p.s.length && TCHAR.test(p.s[p.i])) p.i++;
  return p.s.slice(start, p.i);
}

// parameters: any number of ;key[=value], checked and ignored.
function parameters(p) {
  while (p.s[p.i] === ';') {
    p.i++;
    skip(p, ' ');
    if (!KEY_START.test(p.s[p.i] || '')) fail(p, 'invalid parameter name');
    while (p.i < p.s.length && KEY_CHAR.test(p.s[p.i])) p.i++;
    if (p.s[p.i] === '=') {
      p.i++;
      bareItem(p, false);
    }
  }
}

module.exports = { parseIdempotencyKey, KeySyntaxError };
