// The Costs page's chart: spend per period, on-demand and spot stacked (Chart.js).
// Figures arrive as strings already rounded by the server; numbers here only draw bars.
(function () {
  function draw() {
    const source = document.getElementById("chart-data");
    const canvas = document.getElementById("spend-chart");
    if (!source || !canvas || typeof Chart === "undefined") return;
    const data = JSON.parse(source.textContent);
    const money = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" });
    const compact = new Intl.NumberFormat("en-US", {
      style: "currency", currency: "USD", notation: "compact", maximumFractionDigits: 1,
    });
    function axisLabel(value, ticks) {
      const step = ticks.length > 1 ? Math.abs(ticks[1].value - ticks[0].value) : Math.abs(value);
      if (step >= 1000) return compact.format(value);
      const places = step >= 1 || step === 0 ? 0 : Math.min(4, Math.max(2, Math.ceil(-Math.log10(step) - 1e-9)));
      return new Intl.NumberFormat("en-US", {
        style: "currency", currency: "USD",
        minimumFractionDigits: places, maximumFractionDigits: places,
      }).format(value);
    }
    const monthly = data.granularity === "month";
    const labels = data.labels.map((iso) => {
      const day = new Date(iso + "T00:00:00Z");
      const options = monthly
        ? { month: "short", year: "numeric", timeZone: "UTC" }
        : { month: "short", day: "numeric", timeZone: "UTC" };
      const text = day.toLocaleDateString("en-US", options);
      return data.granularity === "week" ? "wk of " + text : text;
    });
    const chart = new Chart(canvas, {
      type: "bar",
      data: {
        labels,
        datasets: [
          {
            label: "On-demand",
            data: data.on_demand.map(Number),
            backgroundColor: "#5b4bd8",
            hoverBackgroundColor: "#3b2bb8",
            borderRadius: 3,
            maxBarThickness: 42,
          },
          {
            label: "Spot",
            data: data.spot.map(Number),
            backgroundColor: "#19b784",
            hoverBackgroundColor: "#0e9f6e",
            borderRadius: 3,
            maxBarThickness: 42,
          },
        ],
      },
      options: {
        responsive: true,
        maintainAspectRatio: false,
        animation: { duration: 250 },
        interaction: { mode: "index", intersect: false },
        scales: {
          x: { stacked: true, grid: { display: false }, ticks: { maxRotation: 0, autoSkipPadding: 12 } },
          y: {
            stacked: true,
            beginAtZero: true,
            grid: { color: "#eef1f6" },
            // Ticks show as many decimals as their step needs: spend under a dollar reads
            // $0.05, $0.10, ... rather than "$0" on every line.
            ticks: { callback: (value, index, ticks) => axisLabel(value, ticks) },
          },
        },
        plugins: {
          legend: { position: "top", align: "end", labels: { boxWidth: 12, boxHeight: 12, usePointStyle: true } },
          tooltip: {
            callbacks: {
              label: (item) => " " + item.dataset.label + ": " + money.format(item.raw),
              footer: (items) => {
                const index = items[0].dataIndex;
                const total = Number(data.on_demand[index]) + Number(data.spot[index]);
                return "Total: " + money.format(total);
              },
            },
          },
        },
      },
    });
    canvas.dataset.ready = "true";
    window.portalSpendChart = chart;
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
