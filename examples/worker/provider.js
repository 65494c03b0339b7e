'use strict';
// A simulated payment provider, in process.  Each call takes delayMs plus
// up to jitterMs, fails with probability failureRate, or hangs (answers only
// after hangMs, long after any sensible timeout) with probability hangRate.
// The dice are seeded by (seed, provider, job, attempt_no), so a run decides
// the same way whichever worker makes the call.

function hash32(s) {
  let h = 2166136261;                      // FNV-1a
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 16777619);
  }
  return h >>> 0;
}

function rng(seed) {                        // mulberry32
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class ProviderError extends Error {}

function createProvider({ name, delayMs = 10, jitterMs = 20, failureRate = 0, hangRate = 0,
  hangMs = 2000, seed = 1 }) {
  const calls = [];   // what the provider was asked and how it behaved
  let inFlight = 0;
  return {
    name,
    calls,
    get inFlight() { return inFlight; },
    // job: { job_id, params }; resolves with the provider's result
    call(job, attemptNo) {
      const dice = rng(hash32(`${seed}/${name}/${job.job_id}/${attemptNo}`));
      const hang = dice() < hangRate;
      const fail = !hang && dice() < failureRate;
      const ms = hang ? hangMs : delayMs + Math.floor(dice() * jitterMs);
      calls.push({ job_id: job.job_id, attempt_no: attemptNo, hang, fail });
      inFlight++;
      return new Promise((resolve, reject) => {
        setTimeout(() => {
          inFlight--;
          if (fail) reject(new ProviderError(`${name}: card declined`));
          else resolve({ charge_id: `${name}-${job.job_id}-${attemptNo}`, provider: name,
            amount: job.params.amount });
        }, ms);
      });
    },
  };
}

module.exports = { createProvider, ProviderError };
