'use strict';
// HTML for the console's pages: a tagged template that escapes every value
// it is given (only html`` fragments pass unescaped), the page layout, and
// the small helpers every page uses (times, links, tables, the pager).

// Raw: markup that is already safe (made by html`` or by this file).
class Raw {
  constructor(text) { this.text = text; }
  toString() { return this.text; }
}

// escape: a value as HTML text (null and undefined are empty).
function escape(v) {
  if (v === null || v === undefined) return '';
  return String(v).replace(/[&<>"']/g, (c) => ({
    '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
  })[c]);
}

// part: one interpolated value: Raw as is, arrays joined, others escaped.
function part(v) {
  if (v instanceof Raw) return v.text;
  if (Array.isArray(v)) return v.map(part).join('');
  return escape(v);
}

// html: the tagged template; its result is Raw.
function html(strings, ...values) {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += part(values[i]) + strings[i + 1];
  return new Raw(out);
}

// isoTime: a timestamp (Date or text) as ISO 8601 UTC, or null.
function isoTime(t) {
  if (t === null || t === undefined) return null;
  const d = t instanceof Date ? t : new Date(t);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

// utcText: how a time reads in UTC ("2026-12-02 15:12:15 UTC").
function utcText(iso) {
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)} UTC`;
}

// time: a <time> element in UTC; the page's script shows it in local time
// when the person chose so.
function time(t) {
  const iso = isoTime(t);
  if (!iso) return html`<span class="none">—</span>`;
  return html`<time datetime="${iso}">${utcText(iso)}</time>`;
}

// duration: seconds as "3 h 12 min", "45 s".
function duration(seconds) {
  if (seconds === null || seconds === undefined) return '—';
  let s = Math.max(0, Math.round(Number(seconds)));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  const parts = [];
  if (d) parts.push(`${d} d`);
  if (h) parts.push(`${h} h`);
  if (m && !d) parts.push(`${m} min`);
  if (!d && !h) parts.push(`${s} s`);
  return parts.join(' ');
}

// json: a jsonb value for display, or the reason it is not shown.
function json(value, visible) {
  if (!visible) return html`<span class="hidden-payload">hidden: your role may not read payloads</span>`;
  if (value === null || value === undefined) return html`<span class="none">—</span>`;
  return html`<pre class="json">${JSON.stringify(value, null, 2)}</pre>`;
}

// layout: the whole page around a body.
function layout(ctx, { title, body, refresh }) {
  const b = ctx.base;
  const nav = [
    ['/', 'Attention'], ['/unknown', 'Unknown'], ['/blocked', 'Blocked'], ['/failed', 'Failed'],
    ['/refunds', 'Refunds'], ['/providers', 'Providers'], ['/actions', 'Actions'], ['/intent', 'Find a click'],
  ];
  const who = ctx.session
    ? html`<form class="signout" method="post" action="${b}/signout"><span>Signed in as <strong>${ctx.session.user}</strong></span> <button type="submit">Sign out</button></form>`
    : '';
  const mode = ctx.config.allowActions ? '' : html`<p class="readonly" role="note">Read-only console: actions are disabled (start it with --allow-actions).</p>`;
  return html`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · jobguard console</title>
<link rel="stylesheet" href="${b}/static/console.css">
<script src="${b}/static/console.js" defer></script>
</head>
<body${refresh ? html` data-refresh="${refresh}"` : ''}>
<header>
<a class="brand" href="${b}/">jobguard console</a>
<nav aria-label="Pages"><ul>${nav.map(([p, label]) => html`<li><a href="${b}${p}"${ctx.path === p ? html` aria-current="page"` : ''}>${label}</a></li>`)}</ul></nav>
<div class="tools">${refreshLink(ctx, refresh)}<button type="button" id="tz-toggle" aria-pressed="false">Times: UTC</button>${who}</div>
</header>
<main id="main">
<h1>${title}</h1>
${mode}
${body}
</main>
</body>
</html>
`;
}

// refreshLink: turn the page's auto-refresh on (every 30 s, or the
// server's floor if higher) or off.
function refreshLink(ctx, refresh) {
  if (!ctx.session) return '';
  const query = Object.fromEntries(ctx.url.searchParams);
  if (refresh) {
    delete query.refresh;
    return html`<a href="${link(ctx, ctx.path, query)}">Refreshing every ${refresh} s: stop</a> `;
  }
  return html`<a href="${link(ctx, ctx.path, { ...query, refresh: Math.max(30, ctx.config.refreshFloorSeconds) })}">Refresh every ${Math.max(30, ctx.config.refreshFloorSeconds)} s</a> `;
}

// link: an href under the console's base path with the query given.
function link(ctx, path, query = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== null && v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return `${ctx.base}${path}${s ? `?${s}` : ''}`;
}

// table: a table with a caption, headers and rows of cells (Raw or text).
function table(caption, headers, rows, empty = 'None.') {
  if (rows.length === 0) return html`<p class="empty">${empty}</p>`;
  return html`<table><caption>${caption}</caption>
<thead><tr>${headers.map((h) => html`<th scope="col">${h}</th>`)}</tr></thead>
<tbody>${rows.map((r) => html`<tr>${r.map((c) => html`<td>${c}</td>`)}</tr>`)}</tbody></table>`;
}

// pager: the "next page" link of a keyset-paginated list (none at the end).
function pager(ctx, path, query, nextCursor) {
  if (!nextCursor) return html`<p class="pager">End of the list.</p>`;
  return html`<p class="pager"><a rel="next" href="${link(ctx, path, { ...query, after: nextCursor })}">Next page</a></p>`;
}

// filterForm: a GET form of text fields (the filter lives in the URL).
function filterForm(ctx, path, fields, values) {
  return html`<form class="filters" method="get" action="${ctx.base}${path}" role="search" aria-label="Filter">
${fields.map(([name, label, options]) => (options
    ? html`<label>${label} <select name="${name}">${options.map(([v, l]) => html`<option value="${v}"${(values[name] || '') === v ? ' selected' : ''}>${l}</option>`)}</select></label> `
    : html`<label>${label} <input name="${name}" value="${values[name] || ''}"></label> `))}
<button type="submit">Filter</button></form>`;
}

module.exports = { Raw, html, escape, time, isoTime, utcText, duration, json, layout, link, table, pager, filterForm };
