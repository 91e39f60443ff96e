/**
 * A `data:` URL (RFC 2397: `data:[<mediatype>][;param=value]*[;base64],<data>`) taken apart: its
 * media type (lowercased, "" when none is given), whether its data is base64, and the data as
 * written. Undefined for any other text. Parameters (`;name=photo.jpg`, `;charset=...`) are allowed
 * and dropped.
 */
export function dataUrl(url: string): { mediaType: string; base64: boolean; data: string } | undefined {
  if (!/^data:/i.test(url)) return undefined;
  const comma = url.indexOf(",");
  if (comma < 0) return undefined;
  const [mediaType = "", ...params] = url.slice(5, comma).split(";");
  return { mediaType: mediaType.trim().toLowerCase(), base64: params.at(-1)?.trim().toLowerCase() === "base64", data: url.slice(comma + 1) };
}
