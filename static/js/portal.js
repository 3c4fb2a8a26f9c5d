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
