// A host page's GPU chart: up to the last 24 h of utilization (%) and memory in use (GiB, on an
// axis up to the host's total), from GET /api/v1/instances/{id}/metrics/, redrawn every minute
// (Chart.js; no inline script: CSP). The panel around it is polled; hx-preserve keeps the chart.
// A host with several GPUs also gets a line per GPU (the series' gpus columns) once any GPU
// reported its own values; the legend names each and hides or shows it on a click.
(function () {
  // Eight hues far enough apart to tell GPU lines apart, then round again.
  const HUES = ["#5b4bd8", "#19b784", "#f08c00", "#e03131", "#1c7ed6", "#ae3ec9", "#0ca678", "#868e96"];
  const PERCENT_AXIS = { min: 0, max: 100, grid: { color: "#eef1f6" }, ticks: { callback: (v) => v + " %" } };

  function label(date) {
    return date.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit", timeZone: "UTC" });
  }

  function hostLines(body, total) {
    return [
      { label: "GPU utilization (%)", data: body.points.map((p) => p.utilization), borderColor: "#5b4bd8",
        backgroundColor: "rgba(91,75,216,.12)", fill: true, pointRadius: 0, tension: 0.2, yAxisID: "y" },
      { label: total ? `GPU memory (GiB of ${total})` : "GPU memory (GiB)",
        data: body.points.map((p) => Math.round((p.memory_used_mib / 1024) * 10) / 10),
        borderColor: "#19b784", pointRadius: 0, tension: 0.2, yAxisID: "memory" },
    ];
  }

  function gpuLines(body) {
    return body.gpus.map((gpu, n) => ({
      label: `GPU ${gpu.index}`, data: gpu.utilization, borderColor: HUES[n % HUES.length],
      backgroundColor: HUES[n % HUES.length], borderWidth: 1.5, pointRadius: 0, tension: 0.2,
    }));
  }

  // One line chart on a canvas, kept and redrawn in place: new lines replace the old ones
  // (the legend keeps a hidden GPU hidden, as Chart.js keys visibility by position).
  function lineChart(canvas, scales) {
    let chart = null;
    return function draw(labels, lines) {
      if (chart) {
        chart.data.labels = labels;
        lines.forEach((line, n) => {
          if (chart.data.datasets[n]) chart.data.datasets[n].data = line.data;
          else chart.data.datasets.push(line);
        });
        chart.data.datasets.length = lines.length;
        chart.update("none");
        return;
      }
      chart = new Chart(canvas, {
        type: "line",
        data: { labels: labels, datasets: lines },
        options: {
          responsive: true,
          maintainAspectRatio: false,
          animation: false,
          interaction: { mode: "index", intersect: false },
          scales: { x: { grid: { display: false }, ticks: { maxTicksLimit: 12, maxRotation: 0 } }, ...scales },
          plugins: { legend: { position: "top", align: "end", labels: { boxWidth: 12, usePointStyle: true } } },
        },
      });
      canvas.dataset.ready = "true";
    };
  }

  function start() {
    const canvas = document.getElementById("gpu-chart");
    if (!canvas || typeof Chart === "undefined") return;
    const empty = document.getElementById("gpu-chart-empty");
    const total = Number(canvas.dataset.memoryTotalGib) || undefined;
    const host = lineChart(canvas, {
      y: PERCENT_AXIS,
      memory: { position: "right", beginAtZero: true, max: total, grid: { display: false },
                ticks: { callback: (v) => v + " GiB" } },
    });
    const eachBox = document.getElementById("gpu-each");
    const eachCanvas = document.getElementById("gpu-each-chart");
    const each = eachCanvas && lineChart(eachCanvas, { y: PERCENT_AXIS });

    async function refresh() {
      const answer = await fetch(canvas.dataset.url, { headers: { Accept: "application/json" } });
      if (!answer.ok) return;
      const body = await answer.json();
      const labels = body.points.map((p) => label(new Date(p.at)));
      if (empty) empty.hidden = labels.length > 0;
      canvas.parentElement.hidden = labels.length === 0;
      host(labels, hostLines(body, total));
      if (each) {
        // Drawn once the box is shown: Chart.js sizes a chart from its box.
        eachBox.hidden = body.gpus.length < 2;
        if (!eachBox.hidden) each(labels, gpuLines(body));
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
