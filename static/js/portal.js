// Small behaviours shared by the portal's pages. htmx does the live updates.
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  if (!source) return;
  navigator.clipboard.writeText(source.textContent.trim()).then(() => {
    const label = button.textContent;
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = label; }, 1500);
  });
});

document.addEventListener("change", (event) => {
  const form = event.target.closest("form[data-autosubmit]");
  if (form) form.requestSubmit();
});

// An action the server refused (HX-Trigger: portal:error) is shown for a few seconds.
document.body.addEventListener("portal:error", (event) => {
  const toast = document.getElementById("toast");
  if (!toast) return;
  toast.textContent = event.detail.value;
  toast.hidden = false;
  clearTimeout(toast._timer);
  toast._timer = setTimeout(() => { toast.hidden = true; }, 6000);
});

// Forms that ask first (revoking a token): the question is the form's data-confirm.
document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});

// Bars and markers are sized from data attributes, in percent of their track: the
// Content-Security-Policy refuses style="" attributes, but not a property set from a script.
// data-scale (percent) scales data-left, for the threshold ticks under a budget marker.
function sizeBars(root) {
  root.querySelectorAll("[data-width]").forEach((element) => {
    const width = Number(element.dataset.width);
    if (Number.isFinite(width)) element.style.width = width + "%";
  });
  root.querySelectorAll("[data-left]").forEach((element) => {
    const scale = element.dataset.scale === undefined ? 100 : Number(element.dataset.scale);
    const left = (Number(element.dataset.left) * scale) / 100;
    if (Number.isFinite(left)) element.style.left = left + "%";
  });
}

// On the page as loaded, and on every fragment htmx swaps in later.
if (window.htmx) {
  htmx.onLoad(sizeBars);
} else {
  document.addEventListener("DOMContentLoaded", () => sizeBars(document));
}

// The account menu (a <details>): Escape closes it and gives focus back to its button; a click
// elsewhere closes it too.
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  document.querySelectorAll("details.menu[open]").forEach((menu) => {
    menu.open = false;
    menu.querySelector("summary").focus();
  });
});
document.addEventListener("click", (event) => {
  document.querySelectorAll("details.menu[open]").forEach((menu) => {
    if (!menu.contains(event.target)) menu.open = false;
  });
});
