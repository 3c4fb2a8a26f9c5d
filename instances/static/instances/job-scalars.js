// A job page's metrics: one small chart per TensorBoard scalar the job wrote (train/epoch_loss,
// validation/epoch_accuracy, ...), by step, from the page's scalars URL, redrawn every 10 s
// while the job lives (Chart.js; no inline script: CSP).
(function () {
  const HUES = ["#5b4bd8", "#19b784", "#f08c00", "#e03131", "#1c7ed6", "#ae3ec9", "#0ca678", "#868e96"];
  const charts = {};

  function draw(grid, tag, points, n) {
    let chart = charts[tag];
    const labels = points.map((p) => p[0]);
    const values = points.map((p) => p[1]);
    if (chart) {
      chart.data.labels = labels;
      chart.data.datasets[0].data = values;
      chart.update("none");
      return;
    }
    const box = document.createElement("figure");
    box.className = "scalar-chart";
    box.dataset.tag = tag;
    const caption = document.createElement("figcaption");
    caption.textContent = tag;
    const holder = document.createElement("div");
    holder.className = "scalar-chart-box";
    const canvas = document.createElement("canvas");
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", `${tag} by step`);
    holder.appendChild(canvas);
    box.append(caption, holder);
    grid.appendChild(box);
    charts[tag] = new Chart(canvas, {
      type: "line",
      data: { labels: labels, datasets: [{ label: tag, data: values, borderColor: HUES[n % HUES.length],
        pointRadius: values.length > 40 ? 0 : 2, tension: 0.15 }] },
      options: {
        responsive: true, maintainAspectRatio: false, animation: false,
        interaction: { mode: "index", intersect: false },
        scales: { x: { title: { display: true, text: "step" }, ticks: { maxTicksLimit: 8, maxRotation: 0 } },
                  y: { grid: { color: "#eef1f6" } } },
        plugins: { legend: { display: false } },
      },
    });
  }

  function load(card) {
    const grid = card.querySelector(".scalar-grid");
    const empty = card.querySelector(".scalar-empty");
    fetch(card.dataset.url, { credentials: "same-origin" })
      .then((answer) => (answer.ok ? answer.json() : {}))
      .then((series) => {
        const tags = Object.keys(series);
        empty.hidden = tags.length > 0;
        tags.forEach((tag, n) => draw(grid, tag, series[tag], n));
        card.dataset.ready = "true";
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const card = document.getElementById("job-scalars");
    if (!card || typeof Chart === "undefined") return;
    load(card);
    if (card.dataset.live === "true") setInterval(() => load(card), 10000);
  });
})();
