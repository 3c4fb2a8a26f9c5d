// Django admin, periodic task form: the chosen crontab schedule in words, under the field.
// django-celery-beat sends the words as JSON (readable-crontabs); its inline script that did
// this is replaced by the portal's template, since the Content-Security-Policy refuses it.
(function () {
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
