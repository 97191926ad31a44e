// The review page without this script: a cell's link leads to its box on the page and the
// box's link to its cell, and CSS :target marks where it leads. With it, the chosen cell and
// its box are marked together, and hovering one outlines the other.
(function () {
  "use strict";
  var KEY = /^[bg]-(t\d+-r\d+-c\d+)$/;

  function pair(id) {
    var m = KEY.exec(id || "");
    if (!m) return [];
    return ["b-", "g-"].map(function (p) { return document.getElementById(p + m[1]); })
      .filter(function (e) { return e !== null; });
  }

  function mark(cls, id) {
    document.querySelectorAll("." + cls).forEach(function (e) { e.classList.remove(cls); });
    pair(id).forEach(function (e) { e.classList.add(cls); });
  }

  function chosen() { mark("chosen", decodeURIComponent(location.hash.slice(1))); }

  function owner(target) {
    var e = target instanceof Element ? target.closest("[id^='g-t'], a") : null;
    if (e && e.tagName.toLowerCase() === "a") {
      var inner = e.querySelector("rect[id^='b-t']");
      if (inner) return inner.id;
      e = e.closest("[id^='g-t']");
    }
    return e ? e.id : "";
  }

  window.addEventListener("hashchange", chosen);
  document.addEventListener("DOMContentLoaded", function () {
    chosen();
    var review = document.querySelector(".review");
    if (!review) return;
    review.addEventListener("mouseover", function (ev) { mark("paired", owner(ev.target)); });
    review.addEventListener("mouseleave", function () { mark("paired", ""); });
  });
})();
