// A host page's GPU chart: up to the last 24 h of utilization (%) and memory in use (GiB, on an
// axis up to the host's total), from GET /api/v1/instances/{id}/metrics/, redrawn every minute
// (Chart.js; no inline script: CSP). The panel around it is polled; hx-preserve keeps the chart.
(function () {
  function points(body) {
    return {
      labels: body.points.map((p) => new Date(p.at)),
      utilization: body.points.map((p) => p.utilization),
      memory: body.points.map((p) => Math.round((p.memory_used_mib / 1024) * 10) / 10),
    };
  }

  function label(date) {
    return date.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit", timeZone: "UTC" });
  }

  function start() {
    const canvas = document.getElementById("gpu-chart");
    if (!canvas || typeof Chart === "undefined") return;
    const empty = document.getElementById("gpu-chart-empty");
    const total = Number(canvas.dataset.memoryTotalGib) || undefined;
    let chart = null;

    async function refresh() {
      const answer = await fetch(canvas.dataset.url, { headers: { Accept: "application/json" } });
      if (!answer.ok) return;
      const series = points(await answer.json());
      if (empty) empty.hidden = series.labels.length > 0;
      canvas.parentElement.hidden = series.labels.length === 0;
      if (chart) {
        chart.data.labels = series.labels.map(label);
        chart.data.datasets[0].data = series.utilization;
        chart.data.datasets[1].data = series.memory;
        chart.update("none");
      } else {
        chart = new Chart(canvas, {
          type: "line",
          data: {
            labels: series.labels.map(label),
            datasets: [
              { label: "GPU utilization (%)", data: series.utilization, borderColor: "#5b4bd8",
                backgroundColor: "rgba(91,75,216,.12)", fill: true, pointRadius: 0, tension: 0.2, yAxisID: "y" },
              { label: total ? `GPU memory (GiB of ${total})` : "GPU memory (GiB)", data: series.memory, borderColor: "#19b784",
                pointRadius: 0, tension: 0.2, yAxisID: "memory" },
            ],
          },
          options: {
            responsive: true,
            maintainAspectRatio: false,
            animation: false,
            interaction: { mode: "index", intersect: false },
            scales: {
              x: { grid: { display: false }, ticks: { maxTicksLimit: 12, maxRotation: 0 } },
              y: { min: 0, max: 100, grid: { color: "#eef1f6" }, ticks: { callback: (v) => v + " %" } },
              memory: { position: "right", beginAtZero: true, max: total, grid: { display: false },
                        ticks: { callback: (v) => v + " GiB" } },
            },
            plugins: { legend: { position: "top", align: "end", labels: { boxWidth: 12, usePointStyle: true } } },
          },
        });
        canvas.dataset.ready = "true";
      }
    }

    refresh();
    setInterval(refresh, 60000);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
