'use strict';
// The console's settings: command-line options first, then the
// environment, then the defaults.  The database is the libpq environment
// (PGHOST, PGPORT, PGDATABASE, ...), read by pg itself.

const DEFAULTS = {
  port: 8787,
  listen: '127.0.0.1',
  allowActions: false,
  basePath: '',
  statementTimeoutMs: 3000,
  connectTimeoutMs: 5000,
  refreshFloorSeconds: 10,
  retryCap: 100,
  pageSize: 50,
  sessionIdleMinutes: 30,
  secureCookies: false,
  scopes: [],
};

const USAGE = `usage: node server.js [options]
  --port N                 listen on port N (JOBGUARD_CONSOLE_PORT, default 8787)
  --listen ADDRESS         listen on ADDRESS (default 127.0.0.1)
  --allow-actions          allow the actions (redrive, cancel, retry, mark refunded,
                           pause); without it every request that is not a GET is refused
  --base-path /PREFIX      serve under a sub-path behind a reverse proxy
                           (JOBGUARD_CONSOLE_BASE_PATH)
  --statement-timeout MS   statement_timeout of every query (default 3000)
  --refresh-floor S        the shortest auto-refresh interval served (default 10)
  --retry-cap N            the most failed jobs one retry may take (default 100)
  --page-size N            rows per page (default 50)
  --session-idle-minutes N sign a person out after N idle minutes (default 30)
  --secure-cookies         mark the session cookie Secure (behind HTTPS)
  --scopes A,B             the scopes /intent looks an owner's key up in when
                           none is given (default: the person's own scope)`;

// positive: a whole number of at least min, or an error naming the option.
function positive(name, text, min = 1) {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min) throw new Error(`${name} must be a whole number of at least ${min}, not "${text}"`);
  return n;
}

// basePath: "/prefix" without a trailing slash ("" for the root).
function basePath(text) {
  const p = String(text || '').replace(/\/+$/, '');
  if (p === '') return '';
  if (!/^\/[A-Za-z0-9._~\-/]*$/.test(p)) throw new Error(`--base-path must be a path such as /jobguard, not "${text}"`);
  return p;
}

// parse: the settings from argv and env.
function parse(argv, env) {
  const c = { ...DEFAULTS };
  if (env.JOBGUARD_CONSOLE_PORT) c.port = positive('JOBGUARD_CONSOLE_PORT', env.JOBGUARD_CONSOLE_PORT, 0);
  if (env.JOBGUARD_CONSOLE_BASE_PATH) c.basePath = basePath(env.JOBGUARD_CONSOLE_BASE_PATH);
  const args = [...argv];
  while (args.length) {
    const a = args.shift();
    // val: the value that follows an option
    const val = () => {
      if (!args.length) throw new Error(`${a} needs a value`);
      return args.shift();
    };
    switch (a) {
      case '--port': c.port = positive(a, val(), 0); break;
      case '--listen': c.listen = val(); break;
      case '--allow-actions': c.allowActions = true; break;
      case '--base-path': c.basePath = basePath(val()); break;
      case '--statement-timeout': c.statementTimeoutMs = positive(a, val()); break;
      case '--refresh-floor': c.refreshFloorSeconds = positive(a, val()); break;
      case '--retry-cap': c.retryCap = positive(a, val()); break;
      case '--page-size': c.pageSize = positive(a, val()); break;
      case '--session-idle-minutes': c.sessionIdleMinutes = positive(a, val()); break;
      case '--secure-cookies': c.secureCookies = true; break;
      case '--scopes': c.scopes = val().split(',').map((x) => x.trim()).filter(Boolean); break;
      case '--help': case '-h': c.help = true; break;
      default: throw new Error(`unknown option ${a}`);
    }
  }
  return c;
}

module.exports = { parse, USAGE, DEFAULTS };
