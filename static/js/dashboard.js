// The dashboard's trend bars take their height from data-height (percent of the tallest day):
// the Content-Security-Policy refuses style="" attributes, not a property set from a script.
document.querySelectorAll("[data-height]").forEach((bar) => {
  const height = Number(bar.dataset.height);
  if (Number.isFinite(height)) bar.style.height = height + "%";
});
