// otpguard console: confirmations, and the config editor's checks as you
// type. No framework, nothing fetched from elsewhere.
(function () {
  'use strict';
  var readonly = document.body.classList.contains('readonly');
  document.querySelectorAll('.write').forEach(function (b) { if (readonly) { b.disabled = true; b.title = 'your token may read only'; } });
  document.querySelectorAll('form[data-confirm]').forEach(function (f) {
    f.addEventListener('submit', function (e) { if (!window.confirm(f.dataset.confirm)) { e.preventDefault(); } });
  });
  var doc = document.getElementById('doc');
  if (!doc) { return; }
  var errors = document.getElementById('errors'), diff = document.getElementById('diff'), status = document.getElementById('status');
  function post(path, cb) {
    var body = new URLSearchParams(); body.set('document', doc.value);
    fetch(path, { method: 'POST', body: body }).then(function (r) { return r.json(); }).then(cb)
      .catch(function (e) { status.textContent = String(e); });
  }
  function showErrors(list) {
    errors.textContent = '';
    (list || []).forEach(function (m) { var li = document.createElement('li'); li.textContent = m; errors.appendChild(li); });
  }
  function check() {
    post('/config/validate', function (r) {
      showErrors(r.errors);
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
    post('/config/apply', function (r) {
      if (r.ok) { window.location = '/config?flash=' + encodeURIComponent('applied ' + r.id); return; }
      showErrors(r.errors); status.textContent = 'not applied';
    });
  });
  document.getElementById('simulate').addEventListener('click', function () {
    var sim = document.getElementById('sim'); sim.textContent = 'simulating…';
    var charts = document.getElementById('simcharts'); charts.textContent = '';
    post('/config/simulate', function (r) {
      sim.textContent = r.ok ? r.table : (r.errors || []).join('\n');
      (r.charts || []).forEach(function (svg) {
        // the server draws them (internal/svgchart escapes every text)
        var doc = new DOMParser().parseFromString(svg, 'image/svg+xml');
        charts.appendChild(document.importNode(doc.documentElement, true));
      });
    });
  });
}());
