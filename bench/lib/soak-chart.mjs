// @ts-check
// The soak's chart: a few small panels stacked over one time axis, as a standalone SVG written by
// hand (no browser, no dependency). Each panel is { title, unit, series: [{ name, values }] } with
// one value per interval (undefined: no figure, the line breaks there).

/**
 * @typedef {{ title: string, unit: string, series: Series[] }} Panel
 * @typedef {{ name: string, values: (number | undefined)[] }} Series
 * @typedef {{ from: number, to: number, label: string, color: string }} Band a shaded span
 * @typedef {{ at: number, label: string }} Mark a vertical line
 */

const WIDTH = 900;
const PANEL_HEIGHT = 150;
const MARGIN = { left: 64, right: 170, top: 26, bottom: 22 };
const COLORS = [
  "#1f77b4",
  "#ff7f0e",
  "#2ca02c",
  "#d62728",
  "#9467bd",
  "#8c564b",
  "#e377c2",
  "#17becf",
  "#7f7f7f",
];

/** @type {Record<string, string>} */
const ENTITIES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" };
/** @param {unknown} text */
const escape = (text) => String(text).replace(/[&<>"]/g, (c) => ENTITIES[c] ?? c);

/**
 * A round upper bound for an axis (1, 2 or 5 × a power of ten) at or above `max`.
 * @param {number} max
 */
function niceMax(max) {
  if (!(max > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  // 10 × power is above max.
  return [1, 2, 5, 10].map((m) => m * power).find((v) => v >= max) ?? 10 * power;
}

/** @param {number} v */
const format = (v) =>
  v >= 10_000
    ? `${(v / 1000).toFixed(0)}k`
    : v >= 1000
      ? `${(v / 1000).toFixed(1)}k`
      : `${+v.toFixed(1)}`;

/**
 * The SVG text. `times`: seconds since the load started at each interval's end; `bands`: shaded
 * spans [{ from, to, label, color }] (warm-up, measured windows); `marks`: vertical lines
 * [{ at, label }] (faults, the load's end).
 * @param {object} chart
 * @param {string} chart.title
 * @param {number[]} chart.times
 * @param {Panel[]} chart.panels
 * @param {Band[]} [chart.bands]
 * @param {Mark[]} [chart.marks]
 */
export function soakChart({ title, times, panels, bands = [], marks = [] }) {
  const plotWidth = WIDTH - MARGIN.left - MARGIN.right;
  const plotHeight = PANEL_HEIGHT - MARGIN.top - MARGIN.bottom;
  const tMax = Math.max(...times, 1);
  /** @param {number} t */
  const x = (t) => MARGIN.left + (t / tMax) * plotWidth;
  const height = 30 + panels.length * PANEL_HEIGHT + 20;
  const out = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${MARGIN.left}" y="18" font-size="14" font-weight="bold">${escape(title)}</text>`,
  ];
  panels.forEach((panel, index) => {
    const top = 30 + index * PANEL_HEIGHT;
    const y0 = top + MARGIN.top;
    const all = panel.series.flatMap((s) =>
      s.values.filter((v) => v !== undefined).filter((v) => Number.isFinite(v)),
    );
    const yMax = niceMax(Math.max(0, ...all));
    /** @param {number} v */
    const y = (v) => y0 + plotHeight - (v / yMax) * plotHeight;
    out.push(`<g>`);
    out.push(
      `<text x="${MARGIN.left}" y="${top + 16}" font-weight="bold">${escape(panel.title)}</text>`,
    );
    for (const band of bands) {
      out.push(
        `<rect x="${x(band.from)}" y="${y0}" width="${Math.max(0, x(band.to) - x(band.from))}" height="${plotHeight}" fill="${band.color}" opacity="0.35"/>`,
      );
      if (index === 0) {
        out.push(
          `<text x="${x(band.from) + 2}" y="${y0 + 10}" fill="#555" font-size="9">${escape(band.label)}</text>`,
        );
      }
    }
    // Axes, and gridlines at a quarter of the range each.
    for (let i = 0; i <= 4; i++) {
      const v = (yMax * i) / 4;
      out.push(
        `<line x1="${MARGIN.left}" x2="${MARGIN.left + plotWidth}" y1="${y(v)}" y2="${y(v)}" stroke="#ddd"/>`,
        `<text x="${MARGIN.left - 4}" y="${y(v) + 4}" text-anchor="end" fill="#444">${format(v)}</text>`,
      );
    }
    out.push(
      `<text x="12" y="${y0 + plotHeight / 2}" fill="#444" transform="rotate(-90 12 ${y0 + plotHeight / 2})" text-anchor="middle">${escape(panel.unit)}</text>`,
    );
    // Time ticks at a round step (1, 2 or 5 × a power of ten seconds), at most ten.
    const step = niceMax(tMax / 10);
    for (let t = 0; t <= tMax; t += step) {
      out.push(
        `<text x="${x(t)}" y="${y0 + plotHeight + 14}" text-anchor="middle" fill="#444">${Math.round(t)} s</text>`,
      );
    }
    for (const mark of marks) {
      out.push(
        `<line x1="${x(mark.at)}" x2="${x(mark.at)}" y1="${y0}" y2="${y0 + plotHeight}" stroke="#c00" stroke-dasharray="3 3"/>`,
      );
      if (index === 0) {
        out.push(
          `<text x="${x(mark.at) - 2}" y="${y0 + 20}" fill="#c00" font-size="9" text-anchor="end">${escape(mark.label)}</text>`,
        );
      }
    }
    panel.series.forEach((series, i) => {
      const color = COLORS[i % COLORS.length];
      // One path, broken where a value is missing.
      let d = "";
      let pen = false;
      series.values.forEach((v, j) => {
        if (v === undefined || !Number.isFinite(v)) {
          pen = false;
          return;
        }
        d += `${pen ? "L" : "M"}${x(/** @type {number} */ (times[j])).toFixed(1)} ${y(v).toFixed(1)} `;
        pen = true;
      });
      if (d) out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="1.5"/>`);
      const ly = y0 + 4 + i * 13;
      out.push(
        `<line x1="${WIDTH - MARGIN.right + 10}" x2="${WIDTH - MARGIN.right + 26}" y1="${ly}" y2="${ly}" stroke="${color}" stroke-width="2"/>`,
        `<text x="${WIDTH - MARGIN.right + 30}" y="${ly + 4}">${escape(series.name)}</text>`,
      );
    });
    out.push(`</g>`);
  });
  out.push(`</svg>`);
  return out.join("\n") + "\n";
}
