// A small chart of a batch's items finished over time (uPlot).
import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import type { Series } from '../api.js';
import { day, duration, timeOfDay, when } from '../format.js';

/**
 * Steps between time ticks, s: whole seconds at the least, since a bucket is 1 s or longer
 * (uPlot's own steps go down to milliseconds: a 3 s batch read ":18.500, :19.000, …").
 */
const TIME_INCRS = [
  1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200, 86_400, 172_800, 604_800, 2_592_000,
];
/** Steps between count ticks: whole items. */
const COUNT_INCRS = [1, 2, 5]
  .flatMap((m) => [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000].map((p) => m * p))
  .sort((a, b) => a - b);

/** Time tick labels as the page writes times: `04:17:18`, `04:17` from minute steps, dates from day steps. */
const timeLabels = (step: number) => (t: number) =>
  step >= 86_400 ? day(new Date(t * 1000)) : timeOfDay(new Date(t * 1000), step < 60);

const countFormat = new Intl.NumberFormat('en-US');
/** A count in the chart's legend: `1,234`, or `–` where the cursor is on no bucket. */
const countValue = (_u: uPlot, v: number | null) => (v == null ? '–' : countFormat.format(v));

/** Room for the y axis: its longest tick label in the axis font, plus the ticks and the gap, px. */
const yAxisSize: uPlot.Axis.Size = (self, values, axisIdx, cycleNum) => {
  const axis = self.axes[axisIdx] as uPlot.Axis & { _size?: number };
  // uPlot asks again while it settles the layout; the first answer stands.
  if (cycleNum > 1 && axis._size) return axis._size;
  const longest = (values ?? []).reduce((a, v) => (String(v).length > a.length ? String(v) : a), '');
  self.ctx.save();
  self.ctx.font = String((axis.font as unknown as string[] | undefined)?.[0] ?? '12px system-ui');
  const text = self.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
  self.ctx.restore();
  return Math.ceil(text + 20);
};

/** Items finished per bucket of a batch's life: done and failed, as stepped lines. */
export function FinishedChart({ series }: { series: Series }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | undefined>(undefined);
  // Each bucket's count holds from its start to the next; a closing point ends the last one.
  const from = Date.parse(series.from) / 1000;
  const end = from + (series.buckets.length * series.bucketMs) / 1000;
  const last = series.buckets.at(-1) ?? { done: 0, failed: 0 };
  const data: uPlot.AlignedData = [
    [...series.buckets.map((b) => Date.parse(b.at) / 1000), end],
    [...series.buckets.map((b) => b.done), last.done],
    [...series.buckets.map((b) => b.failed), last.failed],
  ];
  const span = useRef<[number, number]>([from, end]);
  span.current = [from, end];
  useEffect(() => {
    const el = box.current!;
    const width = () => Math.max(240, el.clientWidth);
    if (!plot.current) {
      plot.current = new uPlot(
        {
          width: width(),
          height: 160,
          legend: { show: true },
          cursor: { drag: { x: false, y: false } },
          scales: {
            x: { time: true, range: () => span.current },
            y: { range: (_u, _min, max) => [0, Math.max(1, max)] },
          },
          // x: at least 90 px between time ticks, whole seconds at the least, labelled as the
          // page writes times; y: whole items, as wide as its longest label ("10,000" was
          // clipped at a fixed 44 px). The labels drawn are kept on the chart's element
          // (data-x-ticks, data-y-ticks), as text for whoever reads the page's markup.
          axes: [
            {
              stroke: '#3d444d',
              space: 90,
              incrs: TIME_INCRS,
              values: (_u, splits, _i, _space, step) => {
                const labels = splits.map(timeLabels(step));
                el.dataset.xTicks = labels.join(' ');
                return labels;
              },
            },
            {
              stroke: '#3d444d',
              incrs: COUNT_INCRS,
              size: yAxisSize,
              values: (_u, splits) => {
                const labels = splits.map((v) => countFormat.format(v));
                el.dataset.yTicks = labels.join(' ');
                return labels;
              },
            },
          ],
          series: [
            { label: 'time', value: (_u, t) => (t == null ? '–' : when(t * 1000)) },
            {
              label: 'done',
              value: countValue,
              stroke: '#1a7f37',
              fill: 'rgba(26,127,55,0.12)',
              width: 2,
              points: { show: false },
              paths: uPlot.paths.stepped!({ align: 1 }),
            },
            {
              label: 'failed',
              value: countValue,
              stroke: '#cf222e',
              width: 2,
              points: { show: false },
              paths: uPlot.paths.stepped!({ align: 1 }),
            },
          ],
        },
        data,
        el,
      );
      return;
    }
    plot.current.setData(data);
  });
  // As wide as its card, whatever changes the card's width (the window, a scroll bar that comes
  // with the items below): a window's resize alone missed the rest. Observed for the chart's
  // whole life: an effect run on every render disconnected it at an open batch's first poll,
  // and the chart then kept its width when the window narrowed.
  useEffect(() => {
    const el = box.current!;
    const resized = new ResizeObserver(() => {
      const width = Math.max(240, el.clientWidth);
      if (plot.current && plot.current.width !== width) plot.current.setSize({ width, height: 160 });
    });
    resized.observe(el);
    return () => {
      resized.disconnect();
      plot.current?.destroy();
    };
  }, []);
  const done = series.buckets.reduce((a, b) => a + b.done, 0);
  const failed = series.buckets.reduce((a, b) => a + b.failed, 0);
  const summary = `Items finished per ${duration(series.bucketMs)}: ${done} done and ${failed} failed in ${series.buckets.length} interval${series.buckets.length === 1 ? '' : 's'}`;
  return html`<figure class="chart">
    <div ref=${box} role="img" aria-label=${summary}></div>
    <figcaption>${summary}</figcaption>
  </figure>`;
}
