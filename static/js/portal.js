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

// Narrow screens: the navigation folds behind the Menu button (portal.css shows the button only
// when this class is set, so without scripts the links simply wrap under the brand).
document.documentElement.classList.add("js");
document.addEventListener("click", (event) => {
  const toggle = event.target.closest(".nav-toggle");
  if (!toggle) return;
  const open = toggle.getAttribute("aria-expanded") !== "true";
  toggle.setAttribute("aria-expanded", String(open));
  toggle.closest(".topbar").classList.toggle("nav-open", open);
});
document.addEventListener("keydown", (event) => {
  const toggle = document.querySelector(".nav-toggle[aria-expanded=true]");
  if (event.key !== "Escape" || !toggle) return;
  toggle.setAttribute("aria-expanded", "false");
  toggle.closest(".topbar").classList.remove("nav-open");
  toggle.focus();
});

// Confirmations in a styled <dialog> rather than the browser's window.confirm. An element says
// what to ask with data attributes: data-confirm (the question), data-confirm-text (what
// happens), data-confirm-ok (the button's label), data-danger (a red button). A bulk button
// (data-confirm-hosts="<action>") names the hosts ticked in its form, and says what each ticked
// row's own button for that action (data-action) says beyond the bulk button's words (a pool
// replaces the host, a job recovers, a lease still ends it: the server's one rule), once per
// consequence with the hosts it applies to, so twenty ticked hosts read as a few lines.
function confirmDialog() {
  let dialog = document.getElementById("confirm-dialog");
  if (dialog) return dialog;
  dialog = document.createElement("dialog");
  dialog.id = "confirm-dialog";
  dialog.className = "confirm-dialog";
  dialog.setAttribute("aria-labelledby", "confirm-title");
  dialog.innerHTML = '<form method="dialog">'
    + '<h2 id="confirm-title" class="confirm-title"></h2>'
    + '<p class="confirm-text"></p><div class="confirm-notes"></div><ul class="confirm-list"></ul>'
    + '<div class="confirm-actions">'
    + '<button type="submit" value="cancel" class="button confirm-cancel">Cancel</button>'
    + '<button type="submit" value="ok" class="button primary confirm-ok">OK</button>'
    + "</div></form>";
  document.body.append(dialog);
  return dialog;
}

function ask({ question, text = "", notes = [], items = [], ok = "OK", danger = false }) {
  const dialog = confirmDialog();
  dialog.querySelector(".confirm-title").textContent = question;
  const body = dialog.querySelector(".confirm-text");
  body.textContent = text;
  body.hidden = !text;
  const said = dialog.querySelector(".confirm-notes");
  said.replaceChildren(...notes.map((note, index) => {
    const p = document.createElement("p");
    p.className = "confirm-text confirm-note";
    if (index) p.style.marginTop = ".4rem"; // a property, not a style="" the CSP refuses
    const who = document.createElement("strong");
    who.textContent = note.hosts + ":";
    p.append(who, " " + note.text);
    return p;
  }));
  said.hidden = !notes.length;
  const list = dialog.querySelector(".confirm-list");
  list.replaceChildren(...items.map((item) => {
    const li = document.createElement("li");
    li.textContent = item;
    return li;
  }));
  list.hidden = !items.length;
  const button = dialog.querySelector(".confirm-ok");
  button.textContent = ok;
  button.classList.toggle("danger", danger);
  button.classList.toggle("primary", !danger);
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "";
    dialog.showModal();
    dialog.querySelector(".confirm-cancel").focus();
  });
}

// What a row's own confirmation says beyond ``plain``, the bulk button's words: the rest, where
// it adds to them (a pool's replacement), all of it, where it says otherwise (a job's run).
function beyond(own, plain) {
  if (!own || own === plain) return "";
  return own.startsWith(plain) ? own.slice(plain.length).trim() : own;
}

// What the ticked hosts' rows add for ``action``: one note per distinct consequence, naming
// its hosts (or "Each of the N" when it is every ticked host's), in the order ticked. A row
// offers no button for an action its host refuses: the bulk answer names that host instead.
function consequencesOf(boxes, action, plain) {
  const byText = new Map();
  if (!action) return [];
  boxes.forEach((box) => {
    const row = box.closest("[data-host]");
    const own = row && row.querySelector(`[data-action="${action}"][data-confirm-text]`);
    const text = own ? beyond(own.dataset.confirmText, plain) : "";
    if (!text) return;
    if (!byText.has(text)) byText.set(text, []);
    byText.get(text).push(box.dataset.name);
  });
  const notes = [...byText].map(([text, names]) => ({
    hosts: names.length > 1 && names.length === boxes.length
      ? "Each of the " + names.length : names.join(", "),
    text,
  }));
  if (notes.length <= NOTES_SHOWN) return notes;
  // Many different consequences (say, hosts of many orders, each lease ending at its own time):
  // the first few, then how many more hosts have one, so the dialog stays a few lines.
  const more = [...byText.values()].slice(NOTES_SHOWN - 1).reduce((n, names) => n + names.length, 0);
  return [
    ...notes.slice(0, NOTES_SHOWN - 1),
    { hosts: more + " more hosts", text: "each have their own note: their rows' own Stop or Terminate say what it is." },
  ];
}

const NOTES_SHOWN = 5;

function questionOf(element, form) {
  const data = element.dataset;
  const boxes = data.confirmHosts !== undefined
    ? [...form.querySelectorAll("input[name=host]:checked")]
    : [];
  const hosts = boxes.map((box) => box.dataset.name);
  const many = hosts.length === 1 ? "1 host" : hosts.length + " hosts";
  return {
    question: (data.confirm || "").replace("{hosts}", many),
    text: data.confirmText || "",
    notes: consequencesOf(boxes, data.confirmHosts, data.confirmText || ""),
    items: hosts,
    ok: data.confirmOk || "OK",
    danger: data.danger !== undefined,
  };
}

document.addEventListener("submit", (event) => {
  const form = event.target;
  const submitter = event.submitter;
  const asker = submitter && submitter.dataset.confirm ? submitter
    : form.dataset.confirm ? form : null;
  if (!asker || form.dataset.confirmed === "yes") {
    delete form.dataset.confirmed;
    return;
  }
  event.preventDefault();
  ask(questionOf(asker, form)).then((yes) => {
    if (!yes) return;
    form.dataset.confirmed = "yes";
    form.requestSubmit(submitter || undefined);
  });
});

// htmx asks before requests with hx-confirm: the same dialog answers.
document.addEventListener("htmx:confirm", (event) => {
  if (!event.detail.question) return;
  event.preventDefault();
  const element = event.detail.elt;
  const details = questionOf(element, element.closest("form") || document);
  if (!element.dataset.confirm) details.question = event.detail.question;
  ask(details).then((yes) => { if (yes) event.detail.issueRequest(true); });
});

// Bulk actions: their buttons wait until a host is ticked; a group's box ticks its hosts.
function syncBulk(form) {
  const ticked = form.querySelectorAll("input[name=host]:checked").length;
  form.querySelectorAll("[data-bulk-count]").forEach((out) => {
    out.textContent = ticked ? ticked + " selected" : "";
  });
  form.querySelectorAll("button[data-confirm-hosts]").forEach((button) => {
    button.disabled = ticked === 0;
  });
  form.querySelectorAll("input[data-select-group]").forEach((box) => {
    const boxes = form.querySelectorAll(`input[name=host][data-group="${box.dataset.selectGroup}"]`);
    const on = [...boxes].filter((b) => b.checked).length;
    box.checked = boxes.length > 0 && on === boxes.length;
    box.indeterminate = on > 0 && on < boxes.length;
  });
}
document.addEventListener("change", (event) => {
  const form = event.target.closest("form[data-bulk]");
  if (!form) return;
  const group = event.target.dataset.selectGroup;
  if (group) {
    form.querySelectorAll(`input[name=host][data-group="${group}"]`).forEach((box) => {
      box.checked = event.target.checked;
    });
  }
  syncBulk(form);
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

// A menu (<details class="menu">) closes when a choice in it is made or the click is elsewhere.
document.addEventListener("click", (event) => {
  document.querySelectorAll("details.menu[open]").forEach((menu) => {
    if (!menu.contains(event.target) || event.target.closest(".menu-panel button, .menu-panel a")) {
      menu.open = false;
    }
  });
});

function onLoad(root) {
  sizeBars(root);
  document.querySelectorAll("form[data-bulk]").forEach(syncBulk);
}

// On the page as loaded, and on every fragment htmx swaps in later.
if (window.htmx) {
  htmx.onLoad(onLoad);
} else {
  document.addEventListener("DOMContentLoaded", () => onLoad(document));
}

// Escape closes an open menu (the account menu, a host's More menu) and gives focus back to its
// button.
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape") return;
  document.querySelectorAll("details.menu[open]").forEach((menu) => {
    menu.open = false;
    menu.querySelector("summary").focus();
  });
});
// A live region polls every few seconds; a poll would close a menu open in it or redraw the
// rows under an open confirmation, so it waits until they are closed.
document.addEventListener("htmx:beforeRequest", (event) => {
  const element = event.detail.elt;
  if (!(element.getAttribute("hx-trigger") || "").startsWith("every")) return;
  const dialog = document.getElementById("confirm-dialog");
  if (element.querySelector("details[open]") || (dialog && dialog.open)) event.preventDefault();
});

// Filter forms in a <details data-fold-narrow> start folded on a phone (unless some filter is
// set: data-keep-open), so the results are on the first screen; open elsewhere.
document.querySelectorAll("details[data-fold-narrow]").forEach((fold) => {
  if (window.matchMedia("(max-width: 820px)").matches && fold.dataset.keepOpen === undefined) {
    fold.open = false;
  }
});
