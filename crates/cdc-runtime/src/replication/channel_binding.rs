//! `tls-server-end-point` channel binding data (RFC 5929 section 4.1) for
//! SCRAM-SHA-256-PLUS: a hash of the server's certificate, with the hash
//! function taken from the certificate's signature algorithm (MD5 and SHA-1
//! are replaced by SHA-256).

use ring::digest;

/// The certificate's signature algorithm OID (DER content bytes) to the hash to use.
const SIGNATURE_HASHES: &[(&[u8], &digest::Algorithm)] = &[
    // md5WithRSAEncryption, sha1WithRSAEncryption -> SHA-256
    (
        &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x04],
        &digest::SHA256,
    ),
    (
        &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x05],
        &digest::SHA256,
    ),
    // sha256/384/512WithRSAEncryption
    (
        &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0B],
        &digest::SHA256,
    ),
    (
        &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0C],
        &digest::SHA384,
    ),
    (
        &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0D],
        &digest::SHA512,
    ),
    // ecdsa-with-SHA1 -> SHA-256, ecdsa-with-SHA256/384/512
    (&[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x01], &digest::SHA256),
    (
        &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02],
        &digest::SHA256,
    ),
    (
        &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x03],
        &digest::SHA384,
    ),
    (
        &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x04],
        &digest::SHA512,
    ),
];

/// Splits one DER element off `buf`: `(tag, content, rest)`.
fn tlv(buf: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = buf.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7F);
        if n == 0 || n > 4 {
            return None;
        }
        let (bytes, rest) = rest.split_at_checked(n)?;
        let len = bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, rest)
    };
    let (content, rest) = rest.split_at_checked(len)?;
    Some((tag, content, rest))
}

/// The signature algorithm OID of a DER certificate.
fn signature_algorithm(cert_der: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    const OID: u8 = 0x06;
    let (SEQUENCE, cert, _) = tlv(cert_der)? else {
        return None;
    };
    let (SEQUENCE, _tbs, rest) = tlv(cert)? else {
        return None;
    };
    let (SEQUENCE, algorithm, _) = tlv(rest)? else {
        return None;
    };
    let (OID, oid, _) = tlv(algorithm)? else {
        return None;
    };
    Some(oid)
}

/// The `tls-server-end-point` binding data for the server certificate, or
/// `None` when its signature algorithm has no defined hash (Ed25519, RSA-PSS)
/// or the certificate cannot be parsed.
pub(crate) fn tls_server_end_point(cert_der: &[u8]) -> Option<Vec<u8>> {
    let oid = signature_algorithm(cert_der)?;
    let (_, algorithm) = SIGNATURE_HASHES.iter().find(|(o, _)| *o == oid)?;
    Some(digest::digest(algorithm, cert_der).as_ref().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal certificate shape: SEQUENCE { SEQUENCE tbs, SEQUENCE { OID }, BIT STRING }.
    fn cert_with(oid: &[u8], tbs_len: usize) -> Vec<u8> {
        fn der(tag: u8, content: &[u8]) -> Vec<u8> {
            let mut v = vec![tag];
            let len = content.len();
            if len < 0x80 {
                v.push(len as u8);
            } else {
                v.extend_from_slice(&[0x82, (len >> 8) as u8, len as u8]);
            }
            v.extend_from_slice(content);
            v
        }
        let tbs = der(0x30, &vec![0xAB; tbs_len]);
        let alg = der(0x30, &der(0x06, oid));
        let sig = der(0x03, &[0, 1, 2, 3]);
        der(0x30, &[tbs, alg, sig].concat())
    }

    #[test]
    fn picks_hash_from_signature_algorithm() {
        let ecdsa256 = cert_with(&[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02], 300);
        let hash = tls_server_end_point(&ecdsa256).unwrap();
        assert_eq!(hash, digest::digest(&digest::SHA256, &ecdsa256).as_ref());
        let rsa384 = cert_with(&[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0C], 10);
        assert_eq!(tls_server_end_point(&rsa384).unwrap().len(), 48);
        let sha1 = cert_with(&[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x05], 10);
        assert_eq!(
            tls_server_end_point(&sha1).unwrap().len(),
            32,
            "SHA-1 is upgraded to SHA-256"
        );
    }

    #[test]
    fn unknown_or_malformed_gives_none() {
        let ed25519 = cert_with(&[0x2B, 0x65, 0x70], 10);
        assert_eq!(tls_server_end_point(&ed25519), None);
        let good = cert_with(&[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x04, 0x03, 0x02], 300);
        for cut in [0, 1, 2, 5, 100, good.len() - 7] {
            assert_eq!(tls_server_end_point(&good[..cut]), None, "cut at {cut}");
        }
        assert_eq!(tls_server_end_point(&[0x30, 0x85, 1, 1, 1, 1, 1]), None);
    }
}
