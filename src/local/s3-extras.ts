// What the local S3 server (src/local/s3.ts) adds to s3rver, so that leasehold's S3 code is
// tested against the calls it makes on S3 (docs/design.md, "Local mode"; issue 37):
// - versioning: PutBucketVersioning / GetBucketVersioning; on a versioned bucket every write
//   keeps a copy of the object under a new version id (in the `.versions` folder, a bucket name
//   S3 refuses, so no request reaches it), answers it in `x-amz-version-id`, and a GET or HEAD
//   with `versionId` reads that copy (ranges included);
// - listings with `encoding-type=url`: keys, prefixes and StartAfter URL-encoded (a space as
//   `+`), and continuation tokens of its own, so a page that ends at a key with a CR or LF
//   resumes (s3rver's tokens do not match such a key);
// - ListMultipartUploads (`GET ?uploads`) and AbortMultipartUpload (`DELETE ?uploadId`).
// - listings that show an object's ETag, size and date from what they kept while its file is
//   unchanged: one stat an object, not a read of its stored MD5 as well.
// s3rver checks no signature, only that the access key is known; these calls check the same.
// The code is JavaScript run by the server's child process (it loads no TypeScript), as a
// function of (server, directory, lib folder) that answers a Koa middleware, placed just before
// s3rver's router.

/** The JavaScript source of the middleware factory: `(server, directory, lib) => middleware`. */
export const S3_EXTRAS = `(server, directory, lib) => {
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');
const { AsyncLocalStorage } = require('async_hooks');
const S3Error = require(path.join(lib, 'models/error.js'));
const { DUMMY_ACCOUNT } = require(path.join(lib, 'models/account.js'));
const AWSAccount = DUMMY_ACCOUNT.constructor;
const store = server.store;
const VERSIONS = '.versions';
const META = 'x-amz-meta-leasehold-version-id';
const TOKEN = 'lh1.';
const stateFile = path.join(directory, '.leasehold-versioning.json');
let versioning = {};
try { versioning = JSON.parse(fs.readFileSync(stateFile, 'utf8')); } catch {}

// What a listing shows of an object (its ETag, size and date; getListingMetadata, added by
// patches/s3rver+3.7.1.patch, reads the object file's stat and its stored MD5) is kept per object
// and shown again while the file's stat is the one it was read with and it was read over a second
// after the file's last change (so a rewrite in the same timestamp tick cannot hide behind it), as
// the patch keeps a folder's entries: a listing then costs one stat an object, not a stat and a
// read of its MD5 (open, fstat, read, close). The S3 bench lists its prefix once before the start,
// so the listings it measures cost the server what a real S3 costs leasehold: nothing of the
// files (docs/development.md, "What the prefix's ratio measures").
const listingMetadata = store.getListingMetadata && store.getListingMetadata.bind(store);
const listed = new Map();
if (listingMetadata) {
  store.getListingMetadata = async (bucket, key) => {
    const file = store.getResourcePath(bucket, key, 'object');
    let st;
    let md5;
    try {
      st = fs.statSync(file, { bigint: true });
      const kept = listed.get(file);
      if (kept && kept.mtimeNs === st.mtimeNs && kept.ctimeNs === st.ctimeNs && kept.size === st.size && kept.ino === st.ino) {
        return { ...kept.meta };
      }
      md5 = fs.readFileSync(file + '.md5').toString();
    } catch {
      // No such object, or no MD5 stored yet: s3rver's own answer (getMetadata writes the MD5).
      listed.delete(file);
      return listingMetadata(bucket, key);
    }
    const meta = { etag: JSON.stringify(md5), 'last-modified': st.mtime.toUTCString(), 'content-length': Number(st.size) };
    const readAtNs = BigInt(Date.now()) * 1000000n;
    if (readAtNs - st.mtimeNs > 1000000000n && readAtNs - st.ctimeNs > 1000000000n) {
      listed.set(file, { mtimeNs: st.mtimeNs, ctimeNs: st.ctimeNs, size: st.size, ino: st.ino, meta: { ...meta } });
    } else {
      listed.delete(file);
    }
    return meta;
  };
}

// A GET or HEAD with versionId reads the version's copy: s3rver's own handler, its store swapped.
const reading = new AsyncLocalStorage();
const getObject = store.getObject.bind(store);
store.getObject = (bucket, key, options) => {
  const v = reading.getStore();
  return v ? getObject(VERSIONS, bucket + '/' + v + '/' + key, options) : getObject(bucket, key, options);
};

const encode = (s) => (typeof s === 'string' ? encodeURIComponent(s).replace(/%2F/g, '/').replace(/%20/g, '+') : s);
const decode = (s) => decodeURIComponent(s);
function target(ctx) {
  const m = /^\\/([^/]+)(?:\\/([^]*))?$/.exec(ctx.path);
  return m ? { bucket: decode(m[1]), key: m[2] ? decode(m[2]) : undefined } : {};
}
function checkAuth(ctx) {
  const m = /Credential=([^/,\\s]+)/.exec(ctx.get('authorization') || '') || [null, ctx.query['X-Amz-Credential'] && String(ctx.query['X-Amz-Credential']).split('/')[0]];
  if (!m[1] || !AWSAccount.registry.get(m[1])) {
    throw new S3Error('InvalidAccessKeyId', 'The AWS Access Key Id you provided does not exist in our records.', { AWSAccessKeyId: m[1] || '' });
  }
}
async function checkBucket(bucket) {
  if (!(await store.getBucket(bucket))) throw new S3Error('NoSuchBucket', 'The specified bucket does not exist', { BucketName: bucket });
}
function readBody(ctx) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    ctx.req.on('data', (c) => chunks.push(c)).on('end', () => resolve(Buffer.concat(chunks).toString('utf8'))).on('error', reject);
  });
}

async function bucketVersioning(ctx, bucket) {
  checkAuth(ctx);
  await checkBucket(bucket);
  if (ctx.method === 'PUT') {
    const status = /<Status>\\s*(Enabled|Suspended)\\s*<\\/Status>/.exec(await readBody(ctx));
    if (!status) throw new S3Error('MalformedXML', 'The XML you provided was not well-formed or did not validate against our published schema.');
    versioning[bucket] = status[1];
    fs.writeFileSync(stateFile, JSON.stringify(versioning));
    ctx.status = 200;
    ctx.body = '';
    return;
  }
  const conf = { '@': { xmlns: 'http://s3.amazonaws.com/doc/2006-03-01/' } };
  if (versioning[bucket]) conf.Status = versioning[bucket];
  ctx.body = { VersioningConfiguration: conf };
}

function uploadsDir(bucket) {
  return store.getResourcePath(bucket, undefined, 'uploads');
}
async function listUploads(ctx, bucket) {
  checkAuth(ctx);
  await checkBucket(bucket);
  const q = ctx.query;
  const prefix = q.prefix || '';
  const url = q['encoding-type'] === 'url';
  const max = Math.min(1000, q['max-uploads'] === undefined ? 1000 : Number(q['max-uploads']));
  const keyMarker = q['key-marker'] || '';
  const idMarker = q['upload-id-marker'] || '';
  let ids = [];
  try { ids = fs.readdirSync(uploadsDir(bucket)); } catch {}
  const all = [];
  for (const id of ids) {
    let key;
    try { key = fs.readFileSync(path.join(uploadsDir(bucket), id, 'key'), 'utf8'); } catch { continue; }
    if (!key.startsWith(prefix)) continue;
    if (key < keyMarker || (key === keyMarker && (!idMarker || id <= idMarker))) continue;
    all.push({ key, id, at: fs.statSync(path.join(uploadsDir(bucket), id)).birthtime });
  }
  all.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.id < b.id ? -1 : 1));
  const page = all.slice(0, max);
  const truncated = all.length > page.length;
  const owner = { ID: DUMMY_ACCOUNT.id, DisplayName: DUMMY_ACCOUNT.displayName };
  ctx.body = {
    ListMultipartUploadsResult: {
      '@': { xmlns: 'http://s3.amazonaws.com/doc/2006-03-01/' },
      Bucket: bucket,
      KeyMarker: url ? encode(keyMarker) : keyMarker,
      UploadIdMarker: idMarker,
      NextKeyMarker: truncated ? (url ? encode(page[page.length - 1].key) : page[page.length - 1].key) : undefined,
      NextUploadIdMarker: truncated ? page[page.length - 1].id : undefined,
      Prefix: url ? encode(prefix) : prefix,
      EncodingType: url ? 'url' : undefined,
      MaxUploads: max,
      IsTruncated: truncated,
      Upload: page.map((u) => ({
        Key: url ? encode(u.key) : u.key,
        UploadId: u.id,
        Initiator: owner,
        Owner: owner,
        StorageClass: 'STANDARD',
        Initiated: u.at.toISOString(),
      })),
    },
  };
}
async function abortUpload(ctx, bucket, key) {
  checkAuth(ctx);
  await checkBucket(bucket);
  const id = String(ctx.query.uploadId);
  const dir = path.join(uploadsDir(bucket), id);
  let stored;
  try { stored = fs.readFileSync(path.join(dir, 'key'), 'utf8'); } catch {}
  if (stored !== key || !/^[0-9a-f]+$/.test(id)) {
    throw new S3Error('NoSuchUpload', 'The specified upload does not exist.', { UploadId: id });
  }
  fs.rmSync(dir, { recursive: true, force: true });
  ctx.status = 204;
}

async function listing(ctx, next, bucket) {
  const q = ctx.query;
  const token = q['continuation-token'];
  const mine = typeof token === 'string' && token.startsWith(TOKEN);
  if (mine) {
    const rest = { ...q, 'start-after': Buffer.from(token.slice(TOKEN.length), 'base64url').toString('utf8') };
    delete rest['continuation-token'];
    ctx.query = rest;
  }
  await next();
  const r = ctx.body && ctx.body.ListBucketResult;
  if (!r) return;
  if (mine) {
    r.ContinuationToken = token;
    r.StartAfter = undefined;
  }
  const last = r.Contents.length ? r.Contents[r.Contents.length - 1].Key : undefined;
  if (r.NextContinuationToken !== undefined && last !== undefined) r.NextContinuationToken = TOKEN + Buffer.from(last).toString('base64url');
  if (q['encoding-type'] !== 'url') return;
  r.EncodingType = 'url';
  for (const f of ['Prefix', 'StartAfter', 'Delimiter', 'Marker', 'NextMarker']) r[f] = encode(r[f]);
  for (const o of r.Contents) o.Key = encode(o.Key);
  for (const p of r.CommonPrefixes) p.Prefix = encode(p.Prefix);
}

async function read(ctx, next) {
  const v = ctx.query.versionId;
  if (typeof v === 'string') await reading.run(v, next);
  else await next();
  const id = typeof v === 'string' ? v : ctx.response.get(META);
  ctx.remove(META);
  if (id) ctx.set('x-amz-version-id', id);
}

async function write(ctx, next, bucket, key) {
  const q = ctx.query;
  const whole = ctx.method === 'PUT' ? !('uploadId' in q || 'tagging' in q || 'acl' in q) : 'uploads' in q;
  if (whole) ctx.request.headers[META] = crypto.randomBytes(12).toString('hex');
  await next();
  // A part, an initiated upload or a failure is no version yet; an object written or completed is.
  if (ctx.status >= 300 || 'uploads' in q || (ctx.method === 'PUT' && !whole)) return;
  const meta = await store.getMetadata(bucket, key);
  const id = meta[META];
  if (!id) return;
  await store.copyObject(bucket, key, VERSIONS, bucket + '/' + id + '/' + key);
  ctx.set('x-amz-version-id', id);
}

return async (ctx, next) => {
  const { bucket, key } = target(ctx);
  const q = ctx.query;
  if (bucket === undefined) return next();
  if (key === undefined) {
    if ('versioning' in q && (ctx.method === 'GET' || ctx.method === 'PUT')) return bucketVersioning(ctx, bucket);
    if (ctx.method === 'GET' && 'uploads' in q) return listUploads(ctx, bucket);
    if (ctx.method === 'GET') return listing(ctx, next, bucket);
    return next();
  }
  if (ctx.method === 'DELETE' && 'uploadId' in q) return abortUpload(ctx, bucket, key);
  if (ctx.method === 'GET' || ctx.method === 'HEAD') return read(ctx, next);
  if ((ctx.method === 'PUT' || ctx.method === 'POST') && versioning[bucket] === 'Enabled') return write(ctx, next, bucket, key);
  return next();
};
}`;
