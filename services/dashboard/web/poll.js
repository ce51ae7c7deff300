// Polling without overlap: `tick` runs now, then `every` ms after each run ends, until
// stopped; a run in flight is aborted by stop (its AbortSignal).
export function poll(every, tick) {
  let timer = null;
  let stopped = false;
  const controller = new AbortController();
  const run = async () => {
    try {
      await tick(controller.signal);
    } catch (e) {
      if (e.name !== "AbortError") console.error(e);
    }
    if (!stopped) timer = setTimeout(run, every);
  };
  run();
  return () => {
    stopped = true;
    clearTimeout(timer);
    controller.abort();
  };
}
