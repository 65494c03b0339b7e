'use strict';
// What the pages share: a panel (one query's section, which says so when
// it timed out or was refused), the stats() numbers, cursors of keyset
// pagination, the action forms, and the filters read from the URL.

const { html, link } = require('../html');
const db = require('../db');

// panel: a section titled title whose content fn(tx) makes in a savepoint
// of its own; a failure becomes a notice in the section (a timeout says so).
async function panel(ctx, tx, { title, id }, fn) {
  const r = await tx.panel(fn);
  if (r.ok) return html`<section aria-labelledby="${id}-h" id="${id}"><h2 id="${id}-h">${title}</h2>${r.value}</section>`;
  const d = db.describe(r.error, ctx.config);
  if (d.kind === 'error') throw r.error;
  return html`<section aria-labelledby="${id}-h" id="${id}" class="panel-${d.kind}"><h2 id="${id}-h">${title}</h2><p class="notice" role="status" data-sqlstate="${d.code || ''}">${d.text}</p></section>`;
}

// stats: jobguard.stats() as { metric: value }.
async function stats(tx) {
  const rows = await tx.query('SELECT metric, value FROM jobguard.stats()');
  return Object.fromEntries(rows.map((r) => [r.metric, r.value === null ? null : Number(r.value)]));
}

// text: a filter value from the URL ('' when absent), at most 255 characters.
function text(ctx, name) {
  const v = ctx.query[name];
  return typeof v === 'string' ? v.slice(0, 255) : '';
}

// idParam: a positive whole number from the URL or a form, or null.
function idParam(v) {
  if (typeof v !== 'string' || !/^[1-9][0-9]{0,18}$/.test(v)) return null;
  return v;
}

// cursor: the keyset cursor of ?after= split into its parts (null: first page).
function cursor(ctx, parts) {
  const raw = text(ctx, 'after');
  if (!raw) return null;
  const pieces = raw.split('~');
  if (pieces.length !== parts) {
    throw Object.assign(new Error('that page link is not one this console made (after=)'), { status: 400 });
  }
  return pieces;
}

// actionForm: a POST form for an action: hidden fields, the visible fields
// (a reason is always asked for), and its button.
function actionForm(ctx, { action, hidden, fields = [], button, disabled, why, label }) {
  const back = ctx.path + ctx.url.search;
  const off = disabled || !ctx.config.allowActions;
  return html`<form method="post" action="${ctx.base}${action}" class="action" aria-label="${label || button}">
${Object.entries({ ...hidden, back }).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}
${fields.map((f) => html`<label>${f.label} <input name="${f.name}" ${f.type ? html`type="${f.type}" ` : ''}${f.value !== undefined ? html`value="${f.value}" ` : ''}${f.required === false ? '' : 'required '}${off ? 'disabled ' : ''}></label> `)}
<button type="submit"${off ? ' disabled' : ''}>${button}</button>${why ? html` <span class="why">${why}</span>` : ''}</form>`;
}

// jobLink: the link to one job's page.
function jobLink(ctx, id) {
  return html`<a href="${link(ctx, `/jobs/${id}`)}">job ${id}</a>`;
}

// numberLink: a number that links to its list.
function numberLink(ctx, n, path, query = {}, label = '') {
  const shown = n === null || n === undefined ? '—' : String(n);
  return html`<a class="number" href="${link(ctx, path, query)}"${label ? html` aria-label="${shown} ${label}"` : ''}>${shown}</a>`;
}

module.exports = { panel, stats, text, idParam, cursor, actionForm, jobLink, numberLink };
