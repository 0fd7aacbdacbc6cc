// The terminal's one writer: lines said while a progress bar is shown go above the bar, never
// into it, and the bar says nothing of the time left before it can estimate it.
import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { Terminal } from '../../src/terminal/index.js';

/** A stream that says it is a terminal and keeps what is written to it. */
function fakeTty(): { stream: NodeJS.WriteStream; text: () => string } {
  let text = '';
  const stream = new Writable({
    write(chunk, _encoding, done) {
      text += String(chunk);
      done();
    },
  }) as unknown as NodeJS.WriteStream;
  Object.assign(stream, {
    isTTY: true,
    columns: 120,
    rows: 40,
    cursorTo: () => true,
    moveCursor: () => true,
    clearLine: () => true,
    clearScreenDown: () => true,
  });
  return { stream, text: () => text };
}

/**
 * What the terminal shows in the end, line by line: text overwrites from the cursor; \r and
 * CSI 1G go back to column 1, CSI 2K clears the line, CSI 0K clears it from the cursor on.
 */
function screenLines(raw: string): string[] {
  const lines: string[] = [];
  let line = '';
  let col = 0;
  // eslint-disable-next-line no-control-regex -- ANSI escape sequences are what this parses
  for (const part of raw.split(/(\x1b\[[0-9;?]*[A-Za-z]|\r|\n)/)) {
    if (part === '\n') {
      lines.push(line);
      line = '';
      col = 0;
    } else if (part === '\r' || part === '\x1b[1G') col = 0;
    else if (part === '\x1b[2K') line = '';
    else if (part === '\x1b[0K') line = line.slice(0, col);
    else if (part && !part.startsWith('\x1b')) {
      line = line.slice(0, col) + part + line.slice(col + part.length);
      col += part.length;
    }
  }
  if (line) lines.push(line);
  return lines;
}

describe('the terminal writer', () => {
  it('writes lines said during a progress bar above it, and the last line below it', async () => {
    const tty = fakeTty();
    const terminal = new Terminal(tty.stream);
    const bar = terminal.bar(100, 0, { n: 0 }, (_o, p) => `bar ${p.value}/${p.total}`);
    for (let i = 1; i <= 5; i++) {
      bar.update(i * 10, { n: i });
      terminal.say(`units: status ${i}`);
      await sleep(120);
    }
    bar.update(100, { n: 6 });
    terminal.say('stopping: handing off running batches…');
    bar.done();
    terminal.say('demo: batch succeeded');
    const lines = screenLines(tty.text());
    // Every said line whole, on its own line, in order; the bar once at the end, then the last line.
    expect(lines.filter((l) => l.startsWith('units:'))).toEqual([1, 2, 3, 4, 5].map((i) => `units: status ${i}`));
    expect(lines.some((l) => /bar \d+\/100.*units|units.*bar \d/.test(l))).toBe(false);
    expect(lines.slice(-3)).toEqual(['stopping: handing off running batches…', 'bar 100/100', 'demo: batch succeeded']);
  });

  it('writes lines as they come when no bar is shown, and refuses a second bar', () => {
    const tty = fakeTty();
    const terminal = new Terminal(tty.stream);
    terminal.say('one');
    const bar = terminal.bar(1, 0, {}, 'x');
    expect(() => terminal.bar(1, 0, {}, 'y')).toThrow(/shown already/);
    bar.done();
    bar.done();
    terminal.say('two');
    expect(tty.text().startsWith('one\n')).toBe(true);
    expect(tty.text().endsWith('two\n')).toBe(true);
  });
});
