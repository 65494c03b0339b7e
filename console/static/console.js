'use strict';
// The console's only script (served from the console itself: the
// Content-Security-Policy allows no inline script).  It shows times in UTC
// or local time (the choice remembered in localStorage), counts down to the
// end of each redrive window and disables a redrive whose window has just
// ended, and reloads a page asked for with ?refresh= (the server holds the
// interval to its floor).

(function () {
  var KEY = 'jobguard-console-times';

  // two: a number as two digits.
  function two(n) { return (n < 10 ? '0' : '') + n; }

  // localText: how an ISO time reads in the browser's time zone.
  function localText(d) {
    var off = -d.getTimezoneOffset();
    var sign = off >= 0 ? '+' : '-';
    off = Math.abs(off);
    return d.getFullYear() + '-' + two(d.getMonth() + 1) + '-' + two(d.getDate()) + ' ' +
      two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds()) +
      ' (local, UTC' + sign + two(Math.floor(off / 60)) + ':' + two(off % 60) + ')';
  }

  // utcText: how an ISO time reads in UTC.
  function utcText(iso) { return iso.slice(0, 10) + ' ' + iso.slice(11, 19) + ' UTC'; }

  // showTimes: every <time> in the chosen zone, and the toggle's label.
  function showTimes() {
    var local = localStorage.getItem(KEY) === 'local';
    var times = document.querySelectorAll('time[datetime]');
    for (var i = 0; i < times.length; i++) {
      var iso = times[i].getAttribute('datetime');
      times[i].textContent = local ? localText(new Date(iso)) : utcText(iso);
    }
    var b = document.getElementById('tz-toggle');
    if (b) {
      b.textContent = local ? 'Times: local' : 'Times: UTC';
      b.setAttribute('aria-pressed', local ? 'true' : 'false');
    }
  }

  // left: a number of seconds as "1 h 02 min 05 s".
  function left(s) {
    var h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
    return (h ? h + ' h ' : '') + (h || m ? two(m) + ' min ' : '') + two(sec) + ' s';
  }

  // tick: every countdown, once a second; a window that ended disables
  // the redrive beside it.
  function tick() {
    var now = Date.now();
    var els = document.querySelectorAll('.countdown[data-until]');
    for (var i = 0; i < els.length; i++) {
      var s = Math.floor((Date.parse(els[i].getAttribute('data-until')) - now) / 1000);
      els[i].textContent = s > 0 ? '(' + left(s) + ' left)' : '(window ended)';
    }
    var rows = document.querySelectorAll('.row-actions[data-window-end]');
    for (var j = 0; j < rows.length; j++) {
      var end = rows[j].getAttribute('data-window-end');
      if (end && Date.parse(end) <= now) {
        var f = rows[j].querySelector('form[action$="/unknown/redrive"]');
        var button = f && f.querySelector('button');
        if (f && !f.hasAttribute('data-ended') && button && !button.disabled) {
          f.setAttribute('data-ended', '');
          var parts = f.querySelectorAll('input, button');
          for (var k = 0; k < parts.length; k++) parts[k].disabled = true;
          var why = document.createElement('span');
          why.className = 'why';
          why.textContent = ' the window has ended: the provider may not deduplicate any more';
          f.appendChild(why);
        }
      }
    }
  }

  document.addEventListener('DOMContentLoaded', function () {
    var b = document.getElementById('tz-toggle');
    if (b) {
      b.addEventListener('click', function () {
        localStorage.setItem(KEY, localStorage.getItem(KEY) === 'local' ? 'utc' : 'local');
        showTimes();
      });
    }
    showTimes();
    tick();
    setInterval(tick, 1000);
    var r = Number(document.body.getAttribute('data-refresh'));
    if (r > 0) setTimeout(function () { location.reload(); }, r * 1000);
  });
}());
