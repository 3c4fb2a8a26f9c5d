// Rows of the quota editor (GPUs per model, markets per type): add and remove rows in place;
// a folded list of instance types names what is ticked as boxes are ticked. Without this
// script the form still works: it always shows one empty row, a row whose select is emptied is
// dropped when saved, and the folded list's summary is right once the page is saved.
(function () {
  function renumber(list) {
    list.querySelectorAll(".quota-row").forEach((row, index) => {
      row.querySelectorAll("select, input").forEach((control) => {
        const label = row.querySelector(`label[for="${control.id}"]`);
        control.id = control.id.replace(/-(\d+)$/, `-${index}`);
        if (label) {
          label.htmlFor = control.id;
          label.textContent = label.textContent.replace(/row \d+$/, `row ${index + 1}`);
        }
      });
    });
  }

  function clear(row) {
    row.querySelectorAll("select").forEach((select) => { select.selectedIndex = 0; });
    row.querySelectorAll("input").forEach((input) => { input.value = ""; });
  }

  document.querySelectorAll("[data-rows]").forEach((box) => {
    box.querySelectorAll("[data-row-add], [data-row-remove]").forEach((button) => {
      button.hidden = false;
    });
  });

  document.addEventListener("click", (event) => {
    const add = event.target.closest("[data-row-add]");
    if (add) {
      const list = add.closest("[data-rows]").querySelector(".quota-row-list");
      const last = list.querySelector(".quota-row:last-child");
      const row = last.cloneNode(true);
      clear(row);
      list.appendChild(row);
      renumber(list);
      row.querySelector("select").focus();
      return;
    }
    const remove = event.target.closest("[data-row-remove]");
    if (remove) {
      const row = remove.closest(".quota-row");
      const list = row.parentElement;
      const box = list.closest("[data-rows]");
      if (list.children.length > 1) {
        row.remove();
        renumber(list);
      } else {
        clear(row);
      }
      box.querySelector("[data-row-add]").focus();
    }
  });

  document.addEventListener("change", (event) => {
    const pick = event.target.closest(".type-pick");
    if (!pick) return;
    const ticked = [...pick.querySelectorAll("input:checked")].map((box) => box.value);
    pick.querySelector(".type-pick-summary").textContent =
      ticked.length ? ticked.join(", ") : pick.dataset.none;
  });
})();
