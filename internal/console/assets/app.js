// otpguard console: confirmations, changes sent as JSON, and the config
// editor's checks as you type. No framework, nothing fetched from
// elsewhere. Every change is a JSON POST to this console's own origin
// (the browser adds its session cookie); what it did is told by the next
// page, from the console's own state.
(function () {
  'use strict';
  var readonly = document.body.classList.contains('readonly');
  document.querySelectorAll('.write').forEach(function (b) { if (readonly) { b.disabled = true; b.title = 'your token may read only'; } });

  // post sends body as JSON; cb gets the answer's JSON, with ok (a 2xx).
  function post(path, body, cb) {
    fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), credentials: 'same-origin' })
      .then(function (r) { return r.json().then(function (j) { j.httpOk = r.ok; return j; }); })
      .then(cb)
      .catch(function (e) { showProblem({ detail: String(e) }); });
  }
  // showProblem shows a problem+json answer at the top of the page.
  function showProblem(p) {
    var el = document.getElementById('problem');
    var lines = [p.detail || p.title || 'failed'];
    Object.keys(p.errors || {}).forEach(function (k) { lines.push(k + ': ' + p.errors[k]); });
    (p.problems || []).forEach(function (m) { lines.push(m); });
    el.textContent = lines.join('\n'); el.hidden = false;
  }
  // next goes to the page a change names (a path of this console).
  function next(r) {
    var to = typeof r.next === 'string' && r.next.charAt(0) === '/' && r.next.charAt(1) !== '/' ? r.next : '/';
    window.location = to;
  }

  // forms.change: a confirmation, then their hidden inputs as JSON
  document.querySelectorAll('form.change').forEach(function (f) {
    f.addEventListener('submit', function (e) {
      e.preventDefault();
      if (readonly || (f.dataset.confirm && !window.confirm(f.dataset.confirm))) { return; }
      var body = {};
      f.querySelectorAll('input[type=hidden]').forEach(function (i) { body[i.name] = i.dataset.type === 'number' ? Number(i.value) : i.value; });
      post(f.dataset.path, body, function (r) { if (r.httpOk) { next(r); } else { showProblem(r); } });
    });
  });

  var doc = document.getElementById('doc');
  if (!doc) { return; }
  var errors = document.getElementById('errors'), diff = document.getElementById('diff'), status = document.getElementById('status');
  function showErrors(list) {
    errors.textContent = '';
    (list || []).forEach(function (m) { var li = document.createElement('li'); li.textContent = m; errors.appendChild(li); });
  }
  // problemLines are a problem's lines for the editor's list.
  function problemLines(r) { return r.problems && r.problems.length ? r.problems : [r.detail || 'failed']; }
  function check() {
    post('/config/validate', { document: doc.value }, function (r) {
      if (!r.httpOk) { showErrors(problemLines(r)); status.textContent = 'invalid'; status.className = 'bad'; return; }
      showErrors(r.problems);
      status.textContent = r.ok ? 'valid' : 'invalid';
      status.className = r.ok ? 'ok' : 'bad';
      diff.textContent = '';
      (r.diff || []).forEach(function (l) {
        var s = document.createElement('span');
        s.className = l[0] === '+' ? 'add' : l[0] === '-' ? 'del' : '';
        s.textContent = l + '\n'; diff.appendChild(s);
      });
    });
  }
  var timer;
  doc.addEventListener('input', function () { clearTimeout(timer); timer = setTimeout(check, 250); });
  check();
  document.getElementById('apply').addEventListener('click', function () {
    if (readonly || !window.confirm('Apply this document? The server reloads it at once.')) { return; }
    post('/config/apply', { document: doc.value }, function (r) {
      if (r.httpOk) { next(r); return; }
      showErrors(problemLines(r)); status.textContent = 'not applied';
    });
  });
  document.getElementById('simulate').addEventListener('click', function () {
    var sim = document.getElementById('sim'); sim.textContent = 'simulating…';
    var charts = document.getElementById('simcharts'); charts.textContent = '';
    post('/config/simulate', { document: doc.value }, function (r) {
      sim.textContent = r.httpOk ? r.table : problemLines(r).join('\n');
      (r.charts || []).forEach(function (svg) {
        // the server draws them (internal/svgchart escapes every text)
        var d = new DOMParser().parseFromString(svg, 'image/svg+xml');
        charts.appendChild(document.importNode(d.documentElement, true));
      });
    });
  });
}());
