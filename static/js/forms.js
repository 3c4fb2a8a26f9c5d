// Forms that were sent back with errors: put the cursor on the first field that needs changing
// (its error is named by aria-describedby, so a screen reader reads it too). And the order
// page's inputs take the bounds of the project chosen, as the estimate panel reports them.
(function () {
  "use strict";

  function focusFirstError() {
    const invalid = document.querySelector("form [aria-invalid='true']");
    if (!invalid) return;
    const target = invalid.matches("fieldset") ? invalid.querySelector("input, select, textarea") : invalid;
    if (!target) return;
    target.focus({ preventScroll: true });
    target.scrollIntoView({ block: "center" });
  }

  function applyBounds() {
    const bounds = document.getElementById("order-bounds");
    if (!bounds) return;
    const count = document.getElementById("id_count");
    const lease = document.getElementById("id_lease_hours");
    const hint = document.getElementById("count-hint");
    if (count && bounds.dataset.countMax) count.max = bounds.dataset.countMax;
    if (count && bounds.dataset.countMin) count.min = bounds.dataset.countMin;
    const placement = document.getElementById("placement-hint");
    if (placement && bounds.dataset.placementHint) placement.textContent = bounds.dataset.placementHint;
    if (lease && bounds.dataset.leaseMax) lease.max = bounds.dataset.leaseMax;
    if (hint && bounds.dataset.countHint) hint.textContent = bounds.dataset.countHint;
    document.querySelectorAll("[data-bound='lease_max']").forEach(function (node) {
      node.textContent = bounds.dataset.leaseMax;
    });
  }

  document.addEventListener("DOMContentLoaded", focusFirstError);
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.target && event.target.id === "estimate") applyBounds();
  });
})();
