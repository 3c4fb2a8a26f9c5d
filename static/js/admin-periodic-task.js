// Django admin, periodic task form: the chosen crontab schedule in words, under the field.
// django-celery-beat sends the words as JSON (readable-crontabs); its inline script that did
// this is replaced by the portal's template, since the Content-Security-Policy refuses it.
(function () {
  // Django's split date and time inputs carry "Date:" and "Time:" as bare text, no label: name
  // each after its field (the start time's date and time), for screen readers.
  document.querySelectorAll("p.datetime").forEach((row) => {
    const field = row.closest(".form-row, .fieldBox")?.querySelector("label");
    const name = field ? field.textContent.replace(/:\s*$/, "").trim() : "";
    const [date, time] = row.querySelectorAll("input");
    if (date && !date.labels.length) date.setAttribute("aria-label", `${name} date`.trim());
    if (time && !time.labels.length) time.setAttribute("aria-label", `${name} time`.trim());
  });
  const source = document.getElementById("readable-crontabs");
  const select = document.getElementById("id_crontab");
  if (!source || !select) return;
  const readable = JSON.parse(source.textContent);
  const help = document.querySelector(".field-crontab .help");
  const original = help ? help.textContent.trim() : "";
  document.querySelectorAll(".field-crontab_translation").forEach((row) => {
    row.style.display = "none";
  });
  select.addEventListener("change", () => {
    if (!help) return;
    help.textContent = original;
    const words = readable[select.value];
    if (words) help.append(document.createElement("br"), "In words: " + words);
  });
})();
