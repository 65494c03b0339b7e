'use strict';
// Fake payment providers on loopback for the failover end-to-end test
// (e2e/failover/failover.js).  Each deduplicates by Idempotency-Key as real
// providers do: the first request under a key decides its answer (and, when
// it charges, its one effect); a repeat gets the same answer; a key whose
// first request is still being processed is answered 409.
//
//   kind 'refusing'  (A) says no to a share of new keys (402 "declined": it
//                    did nothing); a share of new keys is held (stall) before
//                    the effect, longer than the caller waits
//   kind 'honest'    (B) charges, and answers what the contract wants
//   kind 'breaking'  (C) charges, and answers a result that breaks it
//
// A request with "X-Test-Mode: 1" is the provider's test mode (what the
// certification runner calls): answered as a live one would be, counted
// apart, never an effect.  GET /charges/<key> looks a live key up (200, 409
// in progress, 404 never seen).  Every request and effect is recorded.

const http = require('node:http');

// Provider: one fake provider, its state and its server.
class Provider {
  // name: 'A', 'B' or 'C'; kind (above); rng: () => [0, 1); refuse: the
  // share of new keys refused; stall: the share held stallMs
  constructor(name, kind, { rng, refuse = 0, stall = 0, stallMs = 2500 } = {}) {
    Object.assign(this, { name, kind, rng, refuse, stall, stallMs });
    this.keys = new Map();       // live key -> { jobId, status, answer }
    this.testKeys = new Map();   // test-mode key -> answer
    this.effects = [];           // { key, jobId, attemptId, chargeId }
    this.counts = { live: 0, test: 0, refused: 0, stalled: 0, replays: 0, inProgress: 0,
      lookups: 0, badRequests: 0 };
    this.stalledKeys = new Set();
    this.liveAttempts = [];      // X-Attempt-Id of every live request
  }

  // answerFor: what this provider charges a new request with: its status
  // and body (an effect when status is 200).
  answerFor(chargeId, amount) {
    if (this.kind === 'breaking') return { status: 200, body: { id: chargeId, amount: `${amount}.00` } };
    return { status: 200, body: { charge_id: chargeId, amount } };
  }

  // reply: send a JSON answer (the caller may have gone: ignore that).
  static reply(res, status, body) {
    const data = JSON.stringify(body);
    try {
      res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) });
      res.end(data);
    } catch (err) { /* the caller went away */ }
  }

  // charge: POST /charges {job_id, params}: the effect once per key.
  charge(req, res, body) {
    const key = req.headers['idempotency-key'] || '';
    const test = req.headers['x-test-mode'] === '1';
    let jobId;
    let amount;
    try {
      const v = JSON.parse(body);
      jobId = v.job_id;
      amount = v.params.amount;
    } catch (err) { /* below */ }
    if (!/^[A-Za-z0-9_.:-]{1,100}$/.test(key) || !Number.isInteger(amount)) {
      this.counts.badRequests++;
      return Provider.reply(res, 400, { error: 'bad request' });
    }
    if (test) {
      this.counts.test++;
      if (!this.testKeys.has(key)) {
        this.testKeys.set(key, this.answerFor(`${this.name}-test-${this.testKeys.size + 1}`, amount));
      }
      const a = this.testKeys.get(key);
      return Provider.reply(res, a.status, a.body);
    }
    this.counts.live++;
    this.liveAttempts.push(Number(req.headers['x-attempt-id']));
    const rec = this.keys.get(key);
    if (rec) {
      if (rec.status === null) { this.counts.inProgress++; return Provider.reply(res, 409, { error: 'idempotency_key_in_use' }); }
      this.counts.replays++;
      return Provider.reply(res, rec.status, rec.answer);
    }
    const entry = { jobId, status: null, answer: null };
    this.keys.set(key, entry);
    if (this.refuse > 0 && this.rng() < this.refuse) {
      this.counts.refused++;
      Object.assign(entry, { status: 402, answer: { error: 'declined' } });
      return Provider.reply(res, 402, entry.answer);
    }
    const held = this.stall > 0 && this.rng() < this.stall;
    if (held) { this.counts.stalled++; this.stalledKeys.add(key); }
    setTimeout(() => {
      const chargeId = `${this.name}-${this.effects.length + 1}`;
      const a = this.answerFor(chargeId, amount);
      this.effects.push({ key, jobId, attemptId: Number(req.headers['x-attempt-id']), chargeId });
      Object.assign(entry, { status: a.status, answer: a.body });
      Provider.reply(res, a.status, a.body);
    }, held ? this.stallMs : 1);
    return undefined;
  }

  // lookup: GET /charges/<key>: what happened under a live key.
  lookup(req, res) {
    this.counts.lookups++;
    const rec = this.keys.get(decodeURIComponent(req.url.split('/').pop()));
    if (!rec) return Provider.reply(res, 404, { error: 'no such key' });
    if (rec.status === null) return Provider.reply(res, 409, { error: 'idempotency_key_in_use' });
    return Provider.reply(res, rec.status, rec.answer);
  }

  // start: serve on a free loopback port; resolves to its URL.
  start() {
    this.server = http.createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c) => { body += c; });
      req.on('end', () => {
        if (req.method === 'POST' && req.url === '/charges') this.charge(req, res, body);
        else if (req.method === 'GET' && req.url.startsWith('/charges/')) this.lookup(req, res);
        else Provider.reply(res, 404, { error: 'no such path' });
      });
    });
    return new Promise((resolve) => {
      this.server.listen(0, '127.0.0.1', () => {
        this.url = `http://127.0.0.1:${this.server.address().port}`;
        resolve(this.url);
      });
    });
  }

  // stop: close the server.
  stop() {
    return new Promise((resolve) => {
      this.server.closeAllConnections();
      this.server.close(() => resolve());
    });
  }
}

module.exports = { Provider };
