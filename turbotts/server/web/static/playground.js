// The playground page: a form that streams POST v1/audio/speech (SSE) into a player, live figures,
// captions that follow the playback clock, a download link, and a voice list with clip upload.
// window.turbottsPlayground.last holds what the page measured for the latest run (read by the
// tests and by the browser TTFA benchmark).

import { ApiError, decodeBase64, listVoices, readEvents, startSpeech, uploadVoice } from "./api.js";
import { AudioGraph, BufferedPlayer, MediaSourcePlayer, WebAudioPlayer } from "./players.js";

const $ = (id) => document.getElementById(id);
const MIME_TYPES = {
  mp3: "audio/mpeg", aac: "audio/aac", opus: "audio/ogg", flac: "audio/flac", wav: "audio/wav", pcm: "audio/pcm",
};
const KEY_STORAGE = "turbotts.apiKey";

const page = (window.turbottsPlayground = { last: null, voicesLoaded: false });
let graph = null;
let current = null;
let downloadUrl = null;

function apiKey() {
  return $("api-key").value.trim();
}

function makePlayer(format) {
  if (format === "pcm") return new WebAudioPlayer(graph);
  if (format === "wav") return new WebAudioPlayer(graph, { hasWavHeader: true });
  if ((format === "mp3" || format === "aac") && MediaSourcePlayer.canPlay(MIME_TYPES[format])) {
    return new MediaSourcePlayer($("player"), MIME_TYPES[format]);
  }
  return new BufferedPlayer(graph);
}

function requestBody(format) {
  const body = {
    input: $("text").value,
    voice: $("voice").value,
    response_format: format,
    speed: Number($("speed").value),
  };
  const seed = $("seed").value.trim();
  if (seed !== "") body.seed = Number(seed);
  return body;
}

async function play(event) {
  event.preventDefault();
  const clickMs = performance.now();
  stop();
  graph ??= new AudioGraph($("player"));
  const format = $("format").value;
  const run = {
    format, clickMs, completeMs: null, chunks: [], controller: new AbortController(), player: makePlayer(format),
    stats: {
      format, ttfaMs: null, firstChunkMs: null, numChunks: 0, startedWithS: null, rtf: null, receivedS: 0,
      playedS: 0, peakLevel: 0, numCaptions: 0, activeCaption: null, error: null, errorStatus: null,
      isComplete: false, isFinished: false, usage: null,
    },
  };
  current = run; // set before any await: a second click stops this run
  page.last = run.stats;
  resetView();
  setBusy(true, "synthesizing…");
  try {
    await graph.context.resume();
    requestAnimationFrame(() => tick(run));
    const response = await startSpeech(apiKey(), requestBody(format), run.controller.signal);
    await readEvents(response, (message) => onEvent(run, message));
    await run.player.end();
    if (run === current) complete(run);
  } catch (error) {
    if (error.name === "AbortError" || run !== current) return;
    run.player.stop();
    showError(run, error);
    setBusy(false, "error");
  }
}

function onEvent(run, message) {
  if (message.type === "speech.audio.delta") {
    const bytes = decodeBase64(message.audio);
    run.stats.firstChunkMs ??= performance.now() - run.clickMs;
    run.chunks.push(bytes);
    run.player.push(bytes);
    run.stats.numChunks += 1;
    if (run.stats.startedWithS === null && run.player.firstPlayMs !== null) {
      run.stats.startedWithS = run.player.receivedS(); // the audio in hand when playback was scheduled
    }
    updateRate(run);
  } else if (message.type === "speech.audio.segment") {
    addCaption(run, message);
  } else if (message.type === "speech.audio.done") {
    run.stats.usage = message.usage ?? null;
  } else if (message.type === "error") {
    const error = message.error ?? {};
    throw new ApiError(0, error.message ?? "synthesis failed", error.code ?? null, null);
  }
}

/** The response is complete: final figures and the download link. */
function complete(run) {
  run.completeMs = performance.now();
  run.stats.isComplete = true;
  if (run.stats.startedWithS === null && run.player.firstPlayMs !== null) run.stats.startedWithS = run.player.receivedS();
  updateRate(run);
  if (downloadUrl) URL.revokeObjectURL(downloadUrl);
  downloadUrl = URL.createObjectURL(new Blob(run.chunks, { type: MIME_TYPES[run.format] }));
  const link = $("download");
  link.href = downloadUrl;
  link.download = `turbotts.${run.format}`;
  link.classList.remove("disabled");
  link.setAttribute("aria-disabled", "false");
  if (run.stats.ttfaMs !== null && !run.stats.isFinished) $("status").textContent = "playing";
}

/** Real-time factor: wall seconds from the click to the last byte (so far) per second of audio received
 * (below 1: faster than real time). MediaSource counts audio once it is appended, so this runs every frame. */
function updateRate(run) {
  const receivedS = run.player.receivedS();
  run.stats.receivedS = receivedS;
  $("audio-s").textContent = `${receivedS.toFixed(2)} s`;
  if (receivedS > 0) {
    run.stats.rtf = ((run.completeMs ?? performance.now()) - run.clickMs) / 1000 / receivedS;
    $("rtf").textContent = run.stats.rtf.toFixed(3);
  }
}

/** Once per frame while a run is current: TTFA, level meter, captions, end of playback. */
function tick(run) {
  if (run !== current) return;
  const stats = run.stats;
  const player = run.player;
  if (stats.ttfaMs === null && player.firstPlayMs !== null && performance.now() >= player.firstPlayMs) {
    stats.ttfaMs = player.firstPlayMs - run.clickMs;
    $("ttfa").textContent = `${Math.round(stats.ttfaMs)} ms`;
    $("status").textContent = stats.isComplete ? "playing" : "playing while streaming";
  }
  updateRate(run);
  stats.playedS = player.clock();
  const level = graph.level();
  stats.peakLevel = Math.max(stats.peakLevel, level);
  $("level").value = level;
  highlight(run, stats.playedS);
  if (stats.isComplete && player.isFinished()) {
    stats.isFinished = true;
    highlight(run, Infinity);
    $("level").value = 0;
    setBusy(false, stats.receivedS > 0 ? "done" : "done: the response held no audio");
    return;
  }
  if (stats.error === null) requestAnimationFrame(() => tick(run));
}

function addCaption(run, segment) {
  const span = document.createElement("span");
  span.className = "caption";
  span.dataset.index = segment.index;
  span.dataset.start = segment.start;
  span.dataset.end = segment.end;
  span.textContent = segment.text;
  const box = $("captions");
  if (box.childElementCount) box.append(" ");
  box.append(span);
  run.stats.numCaptions += 1;
}

/** Caption i is active while the playback clock is within [start, end); earlier ones are spoken. */
function highlight(run, playedS) {
  run.stats.activeCaption = null;
  for (const span of $("captions").querySelectorAll(".caption")) {
    const isActive = Number(span.dataset.start) <= playedS && playedS < Number(span.dataset.end);
    span.classList.toggle("active", isActive);
    span.classList.toggle("spoken", Number(span.dataset.end) <= playedS);
    if (isActive) run.stats.activeCaption = Number(span.dataset.index);
  }
}

function stop() {
  if (current === null) return;
  const run = current;
  current = null;
  run.controller.abort();
  run.player.stop();
  setBusy(false, run.stats.isFinished ? "done" : "stopped");
}

function resetView() {
  $("error").hidden = true;
  $("error").textContent = "";
  $("captions").replaceChildren();
  for (const id of ["ttfa", "rtf", "audio-s"]) $(id).textContent = "–";
  const link = $("download");
  link.classList.add("disabled");
  link.setAttribute("aria-disabled", "true");
  link.removeAttribute("href");
}

function setBusy(isBusy, status) {
  $("play").disabled = false;
  $("stop").disabled = !isBusy;
  $("status").textContent = status;
}

function describe(error) {
  if (error instanceof ApiError) return error.describe();
  if (error instanceof TypeError) return `cannot reach the server (${error.message}); is it running?`;
  return String(error?.message ?? error);
}

function showError(run, error) {
  const text = describe(error);
  if (run !== null) {
    run.stats.error = text;
    run.stats.errorStatus = error instanceof ApiError ? error.status : null;
  }
  $("error").textContent = text;
  $("error").hidden = false;
}

/** "name", or "name (reference clip)" for a saved voice that is not a plain seed. */
function voiceLabel(voice) {
  const kinds = { reference: "reference clip", voice: "voice string", mix: "mix" };
  return voice.kind in kinds && !voice.builtin ? `${voice.name} (${kinds[voice.kind]})` : voice.name;
}

async function loadVoices(selected) {
  let voices;
  try {
    voices = await listVoices(apiKey());
  } catch (error) {
    showError(null, error);
    return;
  }
  const select = $("voice");
  const keep = selected ?? select.value;
  const groups = [["Built-in", voices.filter((v) => v.builtin)], ["Saved", voices.filter((v) => !v.builtin)]];
  select.replaceChildren(...groups.filter(([, list]) => list.length).map(([label, list]) => {
    const group = document.createElement("optgroup");
    group.label = label;
    group.append(...list.map((voice) => new Option(voiceLabel(voice), voice.name)));
    return group;
  }));
  if (voices.some((v) => v.name === keep)) select.value = keep;
  if (!page.voicesLoaded) $("error").hidden = true; // a 401 before the key was given is answered now
  page.voicesLoaded = true;
}

async function upload(event) {
  event.preventDefault();
  const status = $("upload-status");
  const file = $("voice-audio").files[0];
  const name = $("voice-name").value.trim();
  status.textContent = "uploading…";
  $("upload-button").disabled = true;
  try {
    const voice = await uploadVoice(apiKey(), name, file, $("voice-transcript").value);
    status.textContent = `added voice "${voice.name}"`;
    await loadVoices(voice.name);
  } catch (error) {
    status.textContent = "upload failed";
    showError(null, error);
  } finally {
    $("upload-button").disabled = false;
  }
}

function init() {
  $("api-key").value = localStorage.getItem(KEY_STORAGE) ?? "";
  $("api-key").addEventListener("change", () => {
    localStorage.setItem(KEY_STORAGE, apiKey());
    loadVoices();
  });
  const showSpeed = () => { $("speed-value").textContent = `${Number($("speed").value).toFixed(2)}×`; };
  $("speed").addEventListener("input", showSpeed);
  showSpeed();
  $("speak").addEventListener("submit", play);
  $("stop").addEventListener("click", stop);
  $("upload").addEventListener("submit", upload);
  loadVoices();
}

init();
