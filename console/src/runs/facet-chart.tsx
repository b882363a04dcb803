import "uplot/dist/uPlot.min.css";
import { useEffect, useRef } from "react";
import uPlot from "uplot";

export interface FacetChartProps {
  /** What the chart shows, for screen readers (the buckets are also buttons beside it). */
  label: string;
  /** One label per bucket, on the x axis. */
  labels: string[];
  counts: number[];
  /** A click on a bucket's bar. */
  onSelect?: (index: number) => void;
  color?: string;
}

/** A bar chart of a facet's buckets (uPlot, loaded with the runs page's charts only). */
export default function FacetChart({ label, labels, counts, onSelect, color }: FacetChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const select = useRef(onSelect);
  select.current = onSelect;

  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const stroke =
      color ?? getComputedStyle(element).getPropertyValue("--mantine-primary-color-filled").trim();
    const axis = getComputedStyle(element).color;
    const options: uPlot.Options = {
      width: Math.max(200, element.clientWidth),
      height: 170,
      legend: { show: false },
      // Marks the chart drawn (data-drawn), for the console's benchmark (bench/console.mjs).
      hooks: { draw: [() => element.setAttribute("data-drawn", "")] },
      cursor: { drag: { x: false, y: false }, points: { show: false } },
      select: { show: false, left: 0, top: 0, width: 0, height: 0 },
      scales: {
        x: { time: false, range: [-0.5, labels.length - 0.5] },
        y: { range: (_u, _min, max) => [0, Math.max(1, max)] },
      },
      axes: [
        {
          stroke: axis,
          grid: { show: false },
          ticks: { show: false },
          splits: () => labels.map((_, i) => i),
          // As many labels as fit, some 90 px each: every other one, every third…
          values: (u, splits) => {
            const step = Math.max(1, Math.ceil((splits.length * 90) / Math.max(1, u.width - 50)));
            return splits.map((i, k) => (k % step === 0 ? shorten(labels[i] ?? "") : ""));
          },
          gap: 4,
          size: 40,
        },
        { stroke: axis, size: 44, grid: { stroke: "rgba(128,128,128,0.15)" } },
      ],
      series: [
        {},
        {
          label,
          fill: stroke,
          stroke,
          paths: uPlot.paths.bars?.({ size: [0.7, 64], align: 0 }),
          points: { show: false },
        },
      ],
    };
    const data: uPlot.AlignedData = [labels.map((_, i) => i), counts];
    const plot = new uPlot(options, data, element);
    const click = () => {
      const index = plot.cursor.idx;
      if (index !== null && index !== undefined && select.current) select.current(index);
    };
    plot.over.addEventListener("click", click);
    if (onSelect) plot.over.classList.add("facet-clickable");
    const resize = new ResizeObserver(() => {
      plot.setSize({ width: Math.max(200, element.clientWidth), height: 170 });
    });
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
    // The chart is made again when its data change; the click handler is read through a ref.
  }, [label, labels.join("\u0000"), counts.join(","), color, onSelect !== undefined]);

  return <div ref={box} className="facet-chart" role="img" aria-label={label} />;
}

function shorten(text: string): string {
  return text.length > 14 ? `${text.slice(0, 13)}…` : text;
}
