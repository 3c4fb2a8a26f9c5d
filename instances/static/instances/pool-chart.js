// A pool page's chart: hosts running on-demand and on spot (stacked), desired, and the hosts
// the project's quota allows, per autoscaler pass over the last 24 h, from the pool's chart
// endpoint; redrawn every 30 s (Chart.js; no inline script: CSP). The x axis is time (UTC
// milliseconds on a linear scale, so no date adapter is needed) spanning the whole window:
// a pool with an hour of samples shows them at the right end, not stretched over the width.
(function () {
  const HOUR = 3600 * 1000;

  function label(ms) {
    return new Date(ms).toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit", timeZone: "UTC" });
  }

  // Ticks on every second whole UTC hour inside the window (Chart.js would start at its edge).
  function evenHours(axis) {
    const ticks = [];
    for (let ms = Math.ceil(axis.min / (2 * HOUR)) * 2 * HOUR; ms <= axis.max; ms += 2 * HOUR) {
      ticks.push({ value: ms });
    }
    axis.ticks = ticks;
  }

  function points(at, values) {
    return values.map((y, i) => ({ x: at[i], y: y }));
  }

  // A quota far above the pool's max is drawn along the top of the axis; its tooltip says
  // the real number.
  function datasets(body, at, top) {
    const quota = body.quota.map((v) => (v === null ? null : Math.min(v, top)));
    // Samples further apart than a few passes are not joined: a pause shows as a gap.
    const gap = body.gap_seconds * 1000;
    return [
      { label: "Running on-demand", data: points(at, body.on_demand), borderColor: "#5b4bd8",
        backgroundColor: "rgba(91,75,216,.35)", fill: "origin", stack: "running", stepped: true,
        pointRadius: 0, borderWidth: 1, spanGaps: gap },
      { label: "Running spot", data: points(at, body.spot), borderColor: "#19b784",
        backgroundColor: "rgba(25,183,132,.35)", fill: "-1", stack: "running", stepped: true,
        pointRadius: 0, borderWidth: 1, spanGaps: gap },
      { label: "Desired", data: points(at, body.desired), borderColor: "#1f2a44", borderWidth: 2,
        fill: false, stepped: true, pointRadius: 0, stack: "desired", spanGaps: gap },
      { label: "Quota allows", data: points(at, quota), raw: body.quota, borderColor: "#d9534f",
        borderDash: [6, 4], borderWidth: 1.5, fill: false, stepped: true, pointRadius: 0,
        spanGaps: gap, stack: "quota" },
    ];
  }

  function start() {
    const canvas = document.getElementById("pool-chart");
    if (!canvas || typeof Chart === "undefined") return;
    const empty = document.getElementById("pool-chart-empty");
    let chart = null;

    async function refresh() {
      const answer = await fetch(canvas.dataset.url, { headers: { Accept: "application/json" } });
      if (!answer.ok) return;
      const body = await answer.json();
      const at = body.at.map(Date.parse);
      const span = { min: Date.parse(body.from), max: Date.parse(body.to) };
      if (empty) empty.hidden = at.length > 0;
      canvas.hidden = at.length === 0;
      // The quota may allow far more hosts than the pool's max: the axis stops just above max
      // (a quota line above it runs along the top), so the pool's own moves stay readable.
      const running = body.on_demand.map((v, i) => v + body.spot[i]);
      const top = Math.max(body.max_size, ...body.desired, ...running) + 1;
      if (chart) {
        datasets(body, at, top).forEach((set, index) => {
          chart.data.datasets[index].data = set.data;
          chart.data.datasets[index].raw = set.raw;
        });
        Object.assign(chart.options.scales.x, span);
        chart.options.scales.y.max = top;
        chart.update("none");
        return;
      }
      chart = new Chart(canvas, {
        type: "line",
        data: { datasets: datasets(body, at, top) },
        options: {
          responsive: true,
          maintainAspectRatio: false,
          animation: false,
          interaction: { mode: "index", intersect: false },
          scales: {
            x: { type: "linear", ...span, grid: { display: false }, afterBuildTicks: evenHours,
                 ticks: { maxRotation: 0, autoSkipPadding: 16, callback: label },
                 title: { display: true, text: "UTC" } },
            y: { stacked: true, beginAtZero: true, max: top, grid: { color: "#eef1f6" },
                 ticks: { precision: 0 }, title: { display: true, text: "hosts" } },
          },
          plugins: {
            tooltip: { callbacks: { title: (items) => (items.length ? label(items[0].parsed.x) : ""),
                                    label: (item) => {
              const raw = item.dataset.raw ? item.dataset.raw[item.dataIndex] : item.raw;
              return `${item.dataset.label}: ${raw === null ? "no limit" : raw}`;
            } } },
            legend: { position: "top", align: "end", labels: { boxWidth: 12, usePointStyle: true } } },
        },
      });
      canvas.dataset.ready = "true";
    }

    refresh();
    setInterval(refresh, 30000);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
