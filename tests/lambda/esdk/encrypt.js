// Encrypts each plaintext of the JSON request on stdin with the AWS
// Encryption SDK for JavaScript and a KMS keyring, as Cognito does for
// the custom sender triggers, and prints a JSON array of base64
// messages. Request: {"endpoint","keyId","plaintexts":[...],
// "context":{...},"commitment":"forbid"|"require","frameLength":n}.
// "forbid" (the SDK 1.x suite, AES-256 HKDF-SHA384 ECDSA P-384) is
// what Cognito sends; "require" is the SDK 2.x default (key commitment).
const { buildClient, CommitmentPolicy, KmsKeyringNode, AlgorithmSuiteIdentifier } = require('@aws-crypto/client-node')
const { KMS } = require('@aws-sdk/client-kms')

async function main () {
  let raw = ''
  for await (const chunk of process.stdin) raw += chunk
  const req = JSON.parse(raw)
  const policy = req.commitment === 'require'
    ? CommitmentPolicy.REQUIRE_ENCRYPT_REQUIRE_DECRYPT
    : CommitmentPolicy.FORBID_ENCRYPT_ALLOW_DECRYPT
  const { encrypt } = buildClient(policy)
  const clientProvider = () => new KMS({
    endpoint: req.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' }
  })
  const keyring = new KmsKeyringNode({ generatorKeyId: req.keyId, clientProvider })
  const out = []
  for (const p of req.plaintexts) {
    const opts = { encryptionContext: req.context || {} }
    if (req.frameLength) opts.frameLength = req.frameLength
    if (req.suite) opts.suiteId = AlgorithmSuiteIdentifier[req.suite]
    const { result } = await encrypt(keyring, Buffer.from(p, 'utf8'), opts)
    out.push(result.toString('base64'))
  }
  process.stdout.write(JSON.stringify(out))
}

main().catch(err => { console.error(err); process.exit(1) })
