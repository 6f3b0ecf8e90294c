// The server's public API as the playground uses it. URLs are relative to the page,
// so the playground works behind a path prefix (a Ray Serve route, a proxy) too.

/** An HTTP error with the server's JSON message (OpenAI's {"error": {...}} shape). */
export class ApiError extends Error {
  constructor(status, message, code, retryAfterS) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfterS = retryAfterS;
  }

  /** "429 rate_limit_exceeded: ... (retry in 1 s)": what the error box shows. */
  describe() {
    const head = this.status ? `${this.status}${this.code ? " " + this.code : ""}: ` : "";
    const retry = this.retryAfterS ? ` (retry in ${this.retryAfterS} s)` : "";
    return `${head}${this.message}${retry}`;
  }
}

export function headers(apiKey, extra = {}) {
  return apiKey ? { ...extra, Authorization: `Bearer ${apiKey}` } : { ...extra };
}

/** The ApiError for a response that is not 2xx, from its JSON body when it has one. */
export async function apiError(response) {
  let message = response.statusText || "request failed";
  let code = null;
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    const error = body.error ?? body;
    message = error.message ?? (typeof body.detail === "string" ? body.detail : text);
    code = error.code ?? null;
  } catch {
    if (text) message = text.slice(0, 500);
  }
  return new ApiError(response.status, message, code, response.headers.get("retry-after"));
}

export async function listVoices(apiKey) {
  const response = await fetch("v1/voices", { headers: headers(apiKey) });
  if (!response.ok) throw await apiError(response);
  return (await response.json()).data;
}

/** POST v1/voices as multipart: a reference clip, its transcript and the new voice's name. */
export async function uploadVoice(apiKey, name, file, transcript) {
  const form = new FormData();
  form.append("name", name);
  form.append("audio", file, file.name || "reference.wav");
  form.append("transcript", transcript);
  const response = await fetch("v1/voices", { method: "POST", headers: headers(apiKey), body: form });
  if (!response.ok) throw await apiError(response);
  return response.json();
}

/** Start POST v1/audio/speech with stream_format "sse"; resolves once the status line is in. */
export async function startSpeech(apiKey, body, signal) {
  const response = await fetch("v1/audio/speech", {
    method: "POST",
    headers: headers(apiKey, { "Content-Type": "application/json" }),
    body: JSON.stringify({ ...body, stream_format: "sse" }),
    signal,
  });
  if (!response.ok) throw await apiError(response);
  return response;
}

/** Call onEvent(parsed JSON) for every SSE `data:` event of a streaming response, as it arrives. */
export async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += value;
    let end;
    while ((end = pending.indexOf("\n\n")) >= 0) {
      const block = pending.slice(0, end);
      pending = pending.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart());
      if (data.length) onEvent(JSON.parse(data.join("\n")));
    }
  }
}

/** base64 -> bytes. */
export function decodeBase64(text) {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}
