// A small chart of a batch's items finished over time (uPlot).
import { html } from 'htm/preact';
import { useEffect, useRef } from 'preact/hooks';
import uPlot from 'uplot';
import type { Series } from '../api.js';
import { duration } from '../format.js';

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
          // x: at least 90 px between time ticks, so a short batch's are not crowded; y: as wide
          // as its longest label ("10,000" was clipped at a fixed 44 px).
          axes: [
            { stroke: '#3d444d', space: 90 },
            { stroke: '#3d444d', size: yAxisSize },
          ],
          series: [
            {},
            {
              label: 'done',
              stroke: '#1a7f37',
              fill: 'rgba(26,127,55,0.12)',
              width: 2,
              points: { show: false },
              paths: uPlot.paths.stepped!({ align: 1 }),
            },
            { label: 'failed', stroke: '#cf222e', width: 2, points: { show: false }, paths: uPlot.paths.stepped!({ align: 1 }) },
          ],
        },
        data,
        el,
      );
      const onResize = () => plot.current?.setSize({ width: width(), height: 160 });
      window.addEventListener('resize', onResize);
      return () => window.removeEventListener('resize', onResize);
    }
    plot.current.setData(data);
    return undefined;
  });
  useEffect(() => () => plot.current?.destroy(), []);
  const done = series.buckets.reduce((a, b) => a + b.done, 0);
  const failed = series.buckets.reduce((a, b) => a + b.failed, 0);
  const summary = `Items finished per ${duration(series.bucketMs)}: ${done} done and ${failed} failed in ${series.buckets.length} intervals`;
  return html`<figure class="chart">
    <div ref=${box} role="img" aria-label=${summary}></div>
    <figcaption>${summary}</figcaption>
  </figure>`;
}
