// Playback of the audio bytes that stream in, one player per response format:
//  - pcm, wav: Web Audio. Every chunk becomes an AudioBuffer scheduled right after the previous one,
//    so the first words play while the rest is still being synthesized.
//  - mp3, aac: MediaSource. Chunks are appended to a SourceBuffer behind the <audio> element.
//  - opus, flac: decodeAudioData once the response is complete (Ogg Opus has no MediaSource type,
//    and the server sends FLAC whole).
// Every player answers clock() (seconds of audio played so far: what the captions follow),
// receivedS() (seconds of audio received) and firstPlayMs (performance.now() of its first sample).

const LEAD_S = 0.02; // schedule a little ahead of the audio clock, so the first buffer never starts late
const WAV_HEADER_BYTES = 44;

/** One AudioContext for the page; both kinds of player play through its level meter. */
export class AudioGraph {
  constructor(element) {
    this.context = new AudioContext();
    this.analyser = this.context.createAnalyser();
    this.analyser.fftSize = 2048;
    this.analyser.connect(this.context.destination);
    this.context.createMediaElementSource(element).connect(this.analyser);
    this.samples = new Float32Array(this.analyser.fftSize);
  }

  /** The peak absolute sample value reaching the speakers in the analyser's last window. */
  level() {
    this.analyser.getFloatTimeDomainData(this.samples);
    let peak = 0;
    for (const s of this.samples) peak = Math.max(peak, Math.abs(s));
    return peak;
  }
}

/** pcm (24 kHz s16le mono) and streamed wav (the same after a 44-byte header) through Web Audio. */
export class WebAudioPlayer {
  constructor(graph, { rateHz = 24000, hasWavHeader = false } = {}) {
    this.graph = graph;
    this.rateHz = rateHz;
    this.headerLeft = hasWavHeader ? WAV_HEADER_BYTES : 0;
    this.header = new Uint8Array(0);
    this.carry = new Uint8Array(0); // an odd byte left from the previous chunk
    this.pieces = []; // {at: audio clock s, offset: s into the audio, duration: s}
    this.sources = [];
    this.nextAt = 0;
    this.totalS = 0;
    this.firstPlayMs = null;
    this.isEnded = false;
    this.isStopped = false;
  }

  push(bytes) {
    bytes = this.takeHeader(bytes);
    const data = concat([this.carry, bytes]);
    const numSamples = data.length >> 1;
    this.carry = data.slice(numSamples * 2);
    if (numSamples === 0) return;
    const view = new DataView(data.buffer, data.byteOffset, numSamples * 2);
    const floats = new Float32Array(numSamples);
    for (let i = 0; i < numSamples; i++) floats[i] = view.getInt16(2 * i, true) / 32768;
    const buffer = this.graph.context.createBuffer(1, numSamples, this.rateHz);
    buffer.copyToChannel(floats, 0);
    this.schedule(buffer);
  }

  /** Strip a streamed WAV header (its sample rate is read from bytes 24..27). */
  takeHeader(bytes) {
    if (this.headerLeft === 0) return bytes;
    const taken = bytes.subarray(0, this.headerLeft);
    this.header = concat([this.header, taken]);
    this.headerLeft -= taken.length;
    if (this.headerLeft === 0) this.rateHz = new DataView(this.header.buffer).getUint32(24, true);
    return bytes.subarray(taken.length);
  }

  schedule(buffer) {
    const context = this.graph.context;
    const at = Math.max(this.nextAt, context.currentTime + LEAD_S);
    const source = context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.graph.analyser);
    source.start(at);
    this.sources.push(source);
    if (this.firstPlayMs === null) this.firstPlayMs = performance.now() + (at - context.currentTime) * 1000;
    this.pieces.push({ at, offset: this.totalS, duration: buffer.duration });
    this.totalS += buffer.duration;
    this.nextAt = at + buffer.duration;
  }

  end() {
    this.isEnded = true;
  }

  clock() {
    const now = this.graph.context.currentTime;
    for (let i = this.pieces.length - 1; i >= 0; i--) {
      const piece = this.pieces[i];
      if (piece.at <= now) return piece.offset + Math.min(now - piece.at, piece.duration);
    }
    return 0;
  }

  receivedS() {
    return this.totalS;
  }

  isFinished() {
    return this.isEnded && this.graph.context.currentTime >= this.nextAt;
  }

  stop() {
    for (const source of this.sources) source.stop();
    this.isStopped = true;
    this.isEnded = true;
    this.nextAt = 0;
  }
}

/** opus and flac: gathered whole, decoded by the browser, then played through Web Audio. */
export class BufferedPlayer extends WebAudioPlayer {
  constructor(graph) {
    super(graph);
    this.chunks = [];
    this.decoding = null;
  }

  push(bytes) {
    this.chunks.push(bytes);
  }

  end() {
    const whole = concat(this.chunks).slice(); // decodeAudioData detaches its buffer: keep the chunks whole
    this.decoding = this.graph.context.decodeAudioData(whole.buffer).then((buffer) => {
      if (!this.isStopped) this.schedule(buffer);
      this.isEnded = true;
    });
    return this.decoding;
  }
}

/** mp3 and aac through MediaSource and the page's <audio> element. */
export class MediaSourcePlayer {
  constructor(element, mimeType) {
    this.element = element;
    this.queue = [];
    this.isEnded = false;
    this.hasStarted = false;
    this.firstPlayMs = null;
    this.sourceBuffer = null;
    this.media = new MediaSource();
    this.url = URL.createObjectURL(this.media);
    element.src = this.url;
    this.media.addEventListener("sourceopen", () => {
      this.sourceBuffer = this.media.addSourceBuffer(mimeType);
      this.sourceBuffer.addEventListener("updateend", () => this.pump());
      this.pump();
    }, { once: true });
    this.onPlaying = () => { this.firstPlayMs ??= performance.now(); };
    element.addEventListener("playing", this.onPlaying, { once: true });
  }

  static canPlay(mimeType) {
    return typeof MediaSource !== "undefined" && MediaSource.isTypeSupported(mimeType);
  }

  push(bytes) {
    this.queue.push(bytes);
    this.pump();
  }

  pump() {
    const buffer = this.sourceBuffer;
    if (buffer === null || buffer.updating || this.media.readyState !== "open") return;
    if (this.queue.length > 0) {
      buffer.appendBuffer(concat(this.queue.splice(0)));
      if (!this.hasStarted) {
        this.hasStarted = true;
        this.element.play().catch(() => {}); // a stop before playback starts rejects it
      }
    } else if (this.isEnded) {
      this.media.endOfStream();
    }
  }

  end() {
    this.isEnded = true;
    this.pump();
  }

  clock() {
    return this.element.currentTime;
  }

  receivedS() {
    const ranges = this.sourceBuffer?.buffered;
    return ranges && ranges.length ? ranges.end(ranges.length - 1) : 0;
  }

  isFinished() {
    return this.isEnded && this.element.ended;
  }

  stop() {
    this.isEnded = true;
    this.element.removeEventListener("playing", this.onPlaying);
    this.element.pause();
    this.element.removeAttribute("src");
    this.element.load();
    URL.revokeObjectURL(this.url);
  }
}

export function concat(parts) {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}
