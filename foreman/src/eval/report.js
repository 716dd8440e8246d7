// Sorting, filtering and opening case details; reads only the page itself.
(function () {
  "use strict";
  var table = document.getElementById("cases");
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var text = document.getElementById("filter");
  var outcome = document.getElementById("outcome");
  var category = document.getElementById("category");
  var count = document.getElementById("shown");
  function apply() {
    var q = text.value.toLowerCase();
    var shown = 0;
    rows.forEach(function (r) {
      var ok = (!q || r.textContent.toLowerCase().indexOf(q) >= 0) &&
        (!outcome.value || r.dataset.outcome === outcome.value) &&
        (!category.value || r.dataset.category === category.value);
      r.hidden = !ok;
      if (ok) { shown += 1; }
    });
    count.textContent = shown + " of " + rows.length + " shown";
  }
  [text, outcome, category].forEach(function (el) {
    el.addEventListener("input", apply);
    el.addEventListener("change", apply);
  });
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var numeric = th.classList.contains("num");
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
        var c = numeric ? (parseFloat(x) || 0) - (parseFloat(y) || 0) : x.localeCompare(y);
        return asc ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  rows.forEach(function (r) {
    r.addEventListener("click", function () {
      var d = document.getElementById(r.dataset.details);
      if (d) { d.open = true; d.scrollIntoView({ behavior: "smooth", block: "start" }); }
    });
  });
  apply();
})();
