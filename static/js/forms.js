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
    const pairs = { count_max: "id_count", lease_max: "id_lease_hours" };
    Object.keys(pairs).forEach(function (key) {
      const value = bounds.dataset[key === "count_max" ? "countMax" : "leaseMax"];
      const input = document.getElementById(pairs[key]);
      if (input && value) input.max = value;
      document.querySelectorAll("[data-bound='" + key + "']").forEach(function (node) {
        node.textContent = value;
      });
    });
  }

  document.addEventListener("DOMContentLoaded", focusFirstError);
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.target && event.target.id === "estimate") applyBounds();
  });
})();
