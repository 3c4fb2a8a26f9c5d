// The job page's log: it opens scrolled to its end, and follows new output as htmx appends it,
// unless the reader has scrolled up to read something (then it stays where they are).
(function () {
  function atEnd(log) {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  }
  document.addEventListener("DOMContentLoaded", function () {
    var log = document.getElementById("job-log");
    if (!log) return;
    log.scrollTop = log.scrollHeight;
    var following = true;
    log.addEventListener("scroll", function () { following = atEnd(log); });
    document.addEventListener("htmx:afterSettle", function () {
      if (following) log.scrollTop = log.scrollHeight;
    });
  });
})();
