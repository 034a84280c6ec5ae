// The console's one script: a node page whose workflow runs follows it live. The
// server sends the timeline block as HTML at every change of the run ("update") and
// "end" once it ended; the page then reloads to show the node as the run left it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var live = document.getElementById("live");
  if (!live || !live.dataset.live || !window.EventSource) {
    return;
  }
  var source = new EventSource(live.dataset.live);
  source.addEventListener("update", function (e) {
    live.innerHTML = e.data;
  });
  source.addEventListener("end", function () {
    source.close();
    window.location.reload();
  });
});
